// Weights a later kernel of the step will read, fetched into the L2 cache while an earlier kernel that
// leaves HBM idle runs (a decode step at a few tokens: the RoPE/KV write and the attention before the O
// projection, the experts' down GEMM before the next layer's QKV projection). A hint only: what a kernel
// computes does not depend on it. The kernel that carries it issues it from one warp (l2_prefetch.cuh).
#pragma once

#include <cstddef>

namespace orchid::kernels {

struct L2Prefetch {
  const void* ptr = nullptr;  // null: nothing to prefetch
  size_t bytes = 0;
};

}  // namespace orchid::kernels
