// Napkin math (gpt-oss, hidden 2880, T = 8192 rows, with delta): per row 4H read + 2H read (delta) + 4H
// written (residual) + 2H written (out) = 12H = 34.6 KB; 283 MB in all = 68 us at 4.17 TB/s. FLOPs are
// negligible (~5 per element). Without delta the residual is neither re-written nor is delta read: 6H per
// row.
//
// One CTA per row; each thread keeps up to kMaxChunks chunks of 8 elements in registers (two 16-byte fp32
// loads + one 16-byte bf16 load per chunk, all issued before the reduction), so the row is read from memory
// once. Block size: the fewest warps with <= kMaxChunks chunks per thread (H = 2880: 360 chunks, 96 threads).
#include "kernels/norm/rmsnorm.h"

#include "kernels/common/cuda_check.h"
#include "kernels/common/pdl.cuh"
#include "kernels/norm/rmsnorm_row.cuh"

namespace orchid::kernels::norm {
namespace {

using detail::kMaxChunks;
using detail::kMaxThreads;

// Eight delta elements as floats: bf16 (one 16-byte load) or fp32 (two).
__device__ __forceinline__ void load_delta8(const __nv_bfloat16* d, int idx, float (&f)[8]) {
  bf16x8_to_float(reinterpret_cast<const uint4*>(d)[idx], f);
}
__device__ __forceinline__ void load_delta8(const float* d, int idx, float (&f)[8]) {
  const float4 a = reinterpret_cast<const float4*>(d)[2 * idx];
  const float4 b = reinterpret_cast<const float4*>(d)[2 * idx + 1];
  f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
}

// DeltaT: bf16 or fp32 delta. out_lo (optional): bf16(y - float(out)), the rest the first rounding lost.
template <typename DeltaT>
__global__ void rmsnorm_residual_kernel(float* __restrict__ residual, const DeltaT* __restrict__ delta,
                                        const float* __restrict__ gamma, __nv_bfloat16* __restrict__ out,
                                        __nv_bfloat16* __restrict__ out_lo, int hidden, float eps) {
  pdl_wait();  // programmatic dependent launch (kernels/common/pdl.cuh)
  const int n_chunks = hidden >> 3;
  const size_t row_off = size_t(blockIdx.x) * size_t(hidden);
  float* res = residual + row_off;
  float v[kMaxChunks][8];
#pragma unroll
  for (int c = 0; c < kMaxChunks; ++c) {
    const int idx = threadIdx.x + c * blockDim.x;
    if (idx < n_chunks) {
      const float4 a = reinterpret_cast<const float4*>(res)[2 * idx];
      const float4 b = reinterpret_cast<const float4*>(res)[2 * idx + 1];
      v[c][0] = a.x, v[c][1] = a.y, v[c][2] = a.z, v[c][3] = a.w;
      v[c][4] = b.x, v[c][5] = b.y, v[c][6] = b.z, v[c][7] = b.w;
      if (delta != nullptr) {
        float d[8];
        load_delta8(delta + row_off, idx, d);
#pragma unroll
        for (int e = 0; e < 8; ++e) v[c][e] = __fadd_rn(v[c][e], d[e]);
        reinterpret_cast<float4*>(res)[2 * idx] = make_float4(v[c][0], v[c][1], v[c][2], v[c][3]);
        reinterpret_cast<float4*>(res)[2 * idx + 1] = make_float4(v[c][4], v[c][5], v[c][6], v[c][7]);
      }
    }
  }
  // The row is in registers: the next kernel may launch (under programmatic dependent launch its CTAs
  // start and read their constants, e.g. the fused router's weights, while this one reduces and writes).
  pdl_launch_dependents();
  detail::rmsnorm_row<kMaxChunks>(v, hidden, gamma, eps, out + row_off,
                                  out_lo != nullptr ? out_lo + row_off : nullptr);
}

template <typename DeltaT>
void launch(float* residual, const DeltaT* delta, const float* gamma, __nv_bfloat16* out,
            __nv_bfloat16* out_lo, int64_t rows, int64_t hidden, float eps, cudaStream_t stream) {
  ORCHID_KERNEL_REQUIRE(hidden > 0 && hidden % 8 == 0, "rmsnorm: hidden must be a positive multiple of 8");
  ORCHID_KERNEL_REQUIRE(hidden <= int64_t(kMaxChunks) * kMaxThreads * 8, "rmsnorm: hidden above 32768");
  ORCHID_KERNEL_REQUIRE(rows >= 0 && rows <= 0x7fffffff, "rmsnorm: bad row count");
  auto aligned = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; };
  ORCHID_KERNEL_REQUIRE(
      aligned(residual) && aligned(delta) && aligned(gamma) && aligned(out) && aligned(out_lo),
      "rmsnorm: pointers must be 16-byte aligned");
  if (rows == 0) return;
  const int threads = detail::row_threads(hidden);
  launch_pdl(rmsnorm_residual_kernel<DeltaT>, dim3(unsigned(rows)), dim3(threads), 0, stream, residual, delta,
             gamma, out, out_lo, int(hidden), eps);
  ORCHID_CUDA_CHECK_LAUNCH();
}

}  // namespace

void rmsnorm_residual(float* residual, const __nv_bfloat16* delta, const float* gamma, __nv_bfloat16* out,
                      int64_t rows, int64_t hidden, float eps, cudaStream_t stream) {
  launch(residual, delta, gamma, out, nullptr, rows, hidden, eps, stream);
}

void rmsnorm_residual_f32(float* residual, const float* delta, const float* gamma, __nv_bfloat16* out,
                          int64_t rows, int64_t hidden, float eps, cudaStream_t stream) {
  launch(residual, delta, gamma, out, nullptr, rows, hidden, eps, stream);
}

void rmsnorm_residual_split(float* residual, const __nv_bfloat16* delta, const float* gamma,
                            __nv_bfloat16* out_hi, __nv_bfloat16* out_lo, int64_t rows, int64_t hidden,
                            float eps, cudaStream_t stream) {
  ORCHID_KERNEL_REQUIRE(out_lo != nullptr || rows == 0, "rmsnorm: split output needs its low half");
  launch(residual, delta, gamma, out_hi, out_lo, rows, hidden, eps, stream);
}

void rmsnorm_residual_split(float* residual, const float* delta, const float* gamma, __nv_bfloat16* out_hi,
                            __nv_bfloat16* out_lo, int64_t rows, int64_t hidden, float eps,
                            cudaStream_t stream) {
  ORCHID_KERNEL_REQUIRE(out_lo != nullptr || rows == 0, "rmsnorm: split output needs its low half");
  launch(residual, delta, gamma, out_hi, out_lo, rows, hidden, eps, stream);
}

}  // namespace orchid::kernels::norm
