// gpt-oss's clamped SwiGLU on biased (gate, up) values, in fp32; shared by every kernel that applies it so
// they agree bit for bit: g = min(gate, limit), l = clamp(up, -limit, limit), g * sigmoid(alpha * g) * (l +
// 1).
#pragma once

namespace orchid::kernels {

__device__ __forceinline__ float swiglu_fp32(float gate, float up, float limit, float alpha) {
  const float g = fminf(gate, limit);
  const float l = fminf(fmaxf(up, -limit), limit);
  const float sig = 1.0f / (1.0f + expf(-alpha * g));
  return g * sig * (l + 1.0f);
}

}  // namespace orchid::kernels
