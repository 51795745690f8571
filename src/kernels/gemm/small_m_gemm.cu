// Small-m BF16 GEMM (see small_m_gemm.h).
//
// Napkin math, gpt-oss decode at batch 1: QKV 5120 x 2880 bf16 = 29.5 MB -> 7.1 us at 4.17 TB/s, O 2880 x
// 4096 = 23.6 MB -> 5.7 us, lm_head 201088 x 2880 = 1.16 GB -> 278 us. The FLOPs are 2 per weight per row:
// nothing. So the kernel is a weight stream: many bytes in flight, nothing else in the way.
//
// Structure: a CTA of 8 warps owns 16 output features (one m16 MMA tile of W rows) and splits k over its
// warps (the weight stream: small_m_mainloop.cuh), then the warps' partial sums meet in shared memory.
// Grid: ceil(n / 16) CTAs (320 for QKV, 180 for O).
#include <cuda_bf16.h>

#include "kernels/common/cuda_check.h"
#include "kernels/common/pdl.cuh"
#include "kernels/gemm/small_m_gemm.h"
#include "kernels/gemm/small_m_mainloop.cuh"

namespace orchid::kernels {
namespace {

using small_m::kWarps;

// kNT n-tiles of 8 rows of x (m <= 8 * kNT).
template <int kNT, bool kF32Out>
__global__ void __launch_bounds__(kWarps * 32)
    small_m_gemm_kernel(DenseGemmArgs a, int64_t ldx, int64_t ldy) {
  __shared__ float partial[kWarps][kNT][4][32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int n0 = blockIdx.x * 16;
  const __nv_bfloat16* w = static_cast<const __nv_bfloat16*>(a.w);
  const bool row_a = n0 + g < a.n, row_b = n0 + g + 8 < a.n;
  const __nv_bfloat16* wa = w + int64_t(row_a ? n0 + g : 0) * a.k + 8 * t;
  const __nv_bfloat16* wb = w + int64_t(row_b ? n0 + g + 8 : 0) * a.k + 8 * t;
  float acc[kNT][4];
  small_m::accumulate<kNT>(wa, wb, row_a, row_b, static_cast<const __nv_bfloat16*>(a.x), ldx, a.m, a.k, acc);
  pdl_wait();  // (a warp without k blocks has not waited yet; y may still be read by the previous kernel)
  pdl_launch_dependents();  // only the reduction and the stores are left
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
    for (int q = 0; q < 4; ++q) partial[warp][nt][q][lane] = acc[nt][q];
  __syncthreads();
  if (warp != 0) return;
    // acc[nt][q]: feature n0 + g + 8 (q >> 1), x row nt * 8 + 2t + (q & 1); summed over the warps in order.
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      float v = 0.0f;
#pragma unroll
      for (int w2 = 0; w2 < kWarps; ++w2) v += partial[w2][nt][q][lane];
      const int col = n0 + g + 8 * (q >> 1), row = nt * 8 + 2 * t + (q & 1);
      if (col >= a.n || row >= a.m) continue;
      if constexpr (kF32Out) {
        float* y = static_cast<float*>(a.y) + int64_t(row) * ldy + col;
        if (a.bias) v += static_cast<const float*>(a.bias)[col];
        *y = a.accumulate ? *y + v : v;
      } else {
        if (a.bias) v += __bfloat162float(static_cast<const __nv_bfloat16*>(a.bias)[col]);
        static_cast<__nv_bfloat16*>(a.y)[int64_t(row) * ldy + col] = __float2bfloat16_rn(v);
      }
    }
  }
}

template <int kNT>
void launch(const DenseGemmArgs& a, int64_t ldx, int64_t ldy, cudaStream_t stream) {
  const unsigned grid = unsigned((a.n + 15) / 16);
  if (a.out == GemmOut::kF32)
    launch_pdl(small_m_gemm_kernel<kNT, true>, dim3(grid), dim3(kWarps * 32), 0, stream, a, ldx, ldy);
  else
    launch_pdl(small_m_gemm_kernel<kNT, false>, dim3(grid), dim3(kWarps * 32), 0, stream, a, ldx, ldy);
}

}  // namespace

bool small_m_gemm_supports(const DenseGemmArgs& a) {
  const int64_t ldx = a.ldx ? a.ldx : a.k;
  return a.m >= 1 && a.m <= kSmallMGemmMaxRows && a.k % 32 == 0 && a.n >= 1 && ldx % 8 == 0 &&
         (reinterpret_cast<uintptr_t>(a.x) | reinterpret_cast<uintptr_t>(a.w)) % 16 == 0;
}

void small_m_gemm(const DenseGemmArgs& a, cudaStream_t stream) {
  ORCHID_KERNEL_REQUIRE(small_m_gemm_supports(a), "small_m_gemm: unsupported shape or alignment");
  ORCHID_KERNEL_REQUIRE(!a.accumulate || a.out == GemmOut::kF32,
                        "small_m_gemm: accumulate needs fp32 output");
  const int64_t ldx = a.ldx ? a.ldx : a.k, ldy = a.ldy ? a.ldy : a.n;
  if (a.m <= 8)
    launch<1>(a, ldx, ldy, stream);
  else
    launch<2>(a, ldx, ldy, stream);
}

}  // namespace orchid::kernels
