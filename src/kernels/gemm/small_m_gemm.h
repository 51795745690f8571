// BF16 GEMM for a few rows (decode batches): y[m, n] = x[m, k] · W[n, k]^T (+ bias) with m <= 16, the
// weights streamed from HBM once and the rows riding along as the narrow dimension of m16n8k16 MMAs
// (weights as A, the rows of x as B). DenseGemm uses it where it measures faster than cuBLASLt's choice.
// Same argument meanings as DenseGemmArgs (bias in the output's type, accumulate with fp32 output only).
#pragma once

#include <cuda_runtime.h>

#include "kernels/gemm/dense_gemm.h"

namespace orchid::kernels {

constexpr int kSmallMGemmMaxRows = 16;

// True when small_m_gemm can serve the call: 1 <= m <= 16, k % 32 == 0, x / w / ldx 16-byte aligned.
bool small_m_gemm_supports(const DenseGemmArgs& args);
void small_m_gemm(const DenseGemmArgs& args, cudaStream_t stream);

}  // namespace orchid::kernels
