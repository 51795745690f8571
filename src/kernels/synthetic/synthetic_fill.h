// Synthetic weights generated on the GPU, bit-identical to model::fill_synthetic on the host (same
// counter-based hash, same exactly-representable uniforms, the same two fp32 roundings, bf16 RNE).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace orchid::kernels {

enum class SyntheticFillKind : uint8_t { kNormalBf16, kNormalF32, kBytes, kScales };

struct SyntheticFill {
  SyntheticFillKind kind = SyntheticFillKind::kNormalBf16;
  uint64_t key = 0;    // model::synthetic_tensor_key(name, seed)
  float scale = 0.0f;  // std * sqrt(3)
  float mean = 0.0f;
};

// Elements [begin, begin + count) of the tensor; `out` points at element `begin`.
void synthetic_fill(const SyntheticFill& f, int64_t begin, int64_t count, void* out, cudaStream_t stream);

}  // namespace orchid::kernels
