// Memory-bound MoE kernels around the expert GEMMs: gathering (and quantizing) the expert inputs in permuted
// row order, the bias + clamped SwiGLU between the two GEMMs, and the weighted combine back to token order.
//
// FP8 activations: one fp32 scale per 1x128 group of a row (K-major [rows, kpad/128]); kpad = k rounded up
// to 128, and the padding columns are written as zeros so the GEMM can run over kpad. The rule is in
// kernels/common/quant.cuh (scale = amax/448).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace orchid::kernels {

inline int round_up_128(int x) {
  return (x + 127) / 128 * 128;
}

// out[r, :] = h[row_token[r], :] (row_token == nullptr: h[r, :]). bf16, k % 8 == 0.
void moe_gather_bf16(const void* h, const int* row_token, int rows, int k, void* out, cudaStream_t stream);

// out_q[r, :] = e4m3 of h[row_token[r], :] in 1x128 groups, out_scale[r, g] its scales; zero-padded to
// round_up_128(k) columns. h bf16 [*, k], k % 4 == 0; row_token == nullptr means the identity.
void moe_gather_quant_fp8(const void* h, const int* row_token, int rows, int k, uint8_t* out_q,
                          float* out_scale, cudaStream_t stream);

// Which kernels moe_gather_quant_fp8 and moe_swiglu_fp8 launch: a block a row with 8 columns a thread (the
// default, for the gather where k % 8 == 0), or a warp a 128-column group (ORCHID_MOE_QUANT_ROWS=0). Same
// results; for tests.
void moe_set_quant_by_rows(bool on);

struct SwigluParams {
  float limit = 7.0f;  // swiglu_limit
  float alpha = 1.702f;
};

// u: bf16 [rows, 2*inter], gate/up interleaved (even column = gate, odd = up), without bias.
// b1: bf16 [E, 2*inter]; row_expert: int32 [rows].
//   g = min(u[2i] + b1[e, 2i], limit);  l = clamp(u[2i+1] + b1[e, 2i+1], -limit, limit)
//   z[i] = g * sigmoid(alpha * g) * (l + 1)
// bf16 output: z [rows, inter]; inter % 4 == 0.
void moe_swiglu_bf16(const void* u, const void* b1, const int* row_expert, int rows, int inter,
                     SwigluParams p, void* z, cudaStream_t stream);
// FP8 output: z_q [rows, round_up_128(inter)] e4m3 + z_scale [rows, round_up_128(inter)/128].
void moe_swiglu_fp8(const void* u, const void* b1, const int* row_expert, int rows, int inter, SwigluParams p,
                    uint8_t* z_q, float* z_scale, cudaStream_t stream);

// x[t, :] += sum_{j<k} topk_w[t, j] * (y[slot_row[t*k+j], :] + b2[topk_idx[t, j], :]), j in order (fixed
// summation order: deterministic). y, b2 bf16; x fp32 (the residual stream); hidden % 8 == 0.
// Expert parallelism: slots with slot_row < 0 (other ranks' experts) are skipped, b2 holds the rank's
// experts from `expert_begin` on; store: x[t, :] = the sum (this rank's part), instead of x += it.
void moe_combine(const void* y, const void* b2, const int* topk_idx, const float* topk_w, const int* slot_row,
                 int num_tokens, int top_k, int hidden, float* x, cudaStream_t stream, int expert_begin = 0,
                 bool store = false);

// moe_combine (all experts on this rank, x += the sum) followed by the next layer's input RMSNorm of x:
// out[t, :] = bf16((x[t, :] * rsqrt(mean(x[t, :]^2) + eps)) * gamma), in one launch (hidden <= 3072; above,
// the two kernels). x gets moe_combine's bits; out those of norm::rmsnorm_residual(x, nullptr, gamma, out)
// up to the order of the sum of squares. gamma fp32 [hidden], out bf16.
void moe_combine_norm(const void* y, const void* b2, const int* topk_idx, const float* topk_w,
                      const int* slot_row, int num_tokens, int top_k, int hidden, float* x,
                      const float* gamma, float eps, void* out, cudaStream_t stream);

}  // namespace orchid::kernels
