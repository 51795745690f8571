// Fused residual add + RMSNorm (gpt-oss-model.md §3), for the pre-attention and pre-MoE norms:
//   residual[t] += delta[t]                      (fp32 residual stream, bf16 delta; skipped when delta is
//   null) out[t] = bf16( residual[t] * rsqrt(mean(residual[t]^2) + eps) * gamma )     (all math in fp32)
// The products are rounded in the reference's order: (t * rsqrt(...)) * gamma, then one rounding to bf16.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace orchid::kernels::norm {

// residual [rows, hidden] fp32 (updated in place when delta != nullptr), delta [rows, hidden] bf16 or null,
// gamma [hidden] fp32, out [rows, hidden] bf16. hidden must be a multiple of 8 and at most 32768; pointers
// 16-byte aligned. rows == 0 launches nothing.
void rmsnorm_residual(float* residual, const __nv_bfloat16* delta, const float* gamma, __nv_bfloat16* out,
                      int64_t rows, int64_t hidden, float eps, cudaStream_t stream);

// The same with an fp32 delta (a tensor-parallel O projection's reduced partial sums).
void rmsnorm_residual_f32(float* residual, const float* delta, const float* gamma, __nv_bfloat16* out,
                          int64_t rows, int64_t hidden, float eps, cudaStream_t stream);

// The precise layers' variant (cuda_backend.h): an fp32 delta (or null), and the output kept above BF16 as
// two BF16 halves, out_hi = bf16(y) (what rmsnorm_residual writes) and out_lo = bf16(y - out_hi), so that
// hi + lo equals the fp32 y to about 2^-17 relative; GEMMs take the halves in two accumulating calls.
void rmsnorm_residual_split(float* residual, const float* delta, const float* gamma, __nv_bfloat16* out_hi,
                            __nv_bfloat16* out_lo, int64_t rows, int64_t hidden, float eps,
                            cudaStream_t stream);
// The same with a bf16 delta (the BF16 layers' O projection).
void rmsnorm_residual_split(float* residual, const __nv_bfloat16* delta, const float* gamma,
                            __nv_bfloat16* out_hi, __nv_bfloat16* out_lo, int64_t rows, int64_t hidden,
                            float eps, cudaStream_t stream);

}  // namespace orchid::kernels::norm
