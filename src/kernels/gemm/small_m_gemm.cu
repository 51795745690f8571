// Small-m BF16 GEMM (see small_m_gemm.h).
//
// Napkin math, gpt-oss decode at batch 1: QKV 5120 x 2880 bf16 = 29.5 MB -> 7.1 us at 4.17 TB/s, O 2880 x
// 4096 = 23.6 MB -> 5.7 us, lm_head 201088 x 2880 = 1.16 GB -> 278 us. The FLOPs are 2 per weight per row:
// nothing. So the kernel is a weight stream: many bytes in flight, nothing else in the way.
//
// Structure: a CTA of 8 warps owns 16 output features (one m16 MMA tile of W rows) and splits k over its
// warps (the weight stream: small_m_mainloop.cuh), then the warps' partial sums meet in shared memory.
// Grid: ceil(n / 16) CTAs (320 for QKV, 180 for O).
//
// Split k (kSplit): a grid of fewer than two tiles an SM leaves the SMs unevenly loaded: O's 180 CTAs put
// two on 48 SMs and one on the other 84, and the kernel lasts as long as the SMs streaming two (at one
// token the O GEMM took 11.6 us for 23.6 MB where QKV took 10.3 for 29.5 MB, H200, RESULTS 2026-12-06
// fourth run). There a cluster of two CTAs shares the 16 features, each half of k (360 CTAs for O: two or
// three an SM); the second CTA's sums reach the first's shared memory (distributed shared memory) and the
// first adds them in a fixed order and stores. Opt-in until measured: ORCHID_SMALL_M_SPLIT=1 (gpu-check's
// small-m-split steps run its tests and the decode A/B).
#include <cooperative_groups.h>
#include <cuda_bf16.h>

#include <cstdlib>
#include <cstring>

#include "kernels/common/cuda_check.h"
#include "kernels/common/device_info.h"
#include "kernels/common/pdl.cuh"
#include "kernels/gemm/small_m_gemm.h"
#include "kernels/gemm/small_m_mainloop.cuh"

namespace orchid::kernels {
namespace {

using small_m::kWarps;
namespace cg = cooperative_groups;

// kNT n-tiles of 8 rows of x (m <= 8 * kNT). kSplit: clusters of two CTAs along x, each half of k (above).
template <int kNT, bool kF32Out, bool kSplit>
__global__ void __launch_bounds__(kWarps * 32)
    small_m_gemm_kernel(DenseGemmArgs a, int64_t ldx, int64_t ldy) {
  __shared__ float partial[kWarps][kNT][4][32];
  __shared__ float peer[kSplit ? kNT : 1][4][32];  // the second CTA's sums (kSplit)
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int half = kSplit ? int(blockIdx.x & 1) : 0;  // the CTA's rank in its cluster
  const int n0 = (kSplit ? blockIdx.x / 2 : blockIdx.x) * 16;
  // This CTA's k range, in whole 32-column blocks.
  const int kb0 = kSplit ? half * (a.k / 32) / 2 : 0, kb1 = kSplit ? (half + 1) * (a.k / 32) / 2 : a.k / 32;
  const __nv_bfloat16* w = static_cast<const __nv_bfloat16*>(a.w) + kb0 * 32;
  const bool row_a = n0 + g < a.n, row_b = n0 + g + 8 < a.n;
  const __nv_bfloat16* wa = w + int64_t(row_a ? n0 + g : 0) * a.k + 8 * t;
  const __nv_bfloat16* wb = w + int64_t(row_b ? n0 + g + 8 : 0) * a.k + 8 * t;
  float acc[kNT][4];
  small_m::accumulate<kNT>(wa, wb, row_a, row_b, static_cast<const __nv_bfloat16*>(a.x) + kb0 * 32, ldx, a.m,
                           (kb1 - kb0) * 32, acc);
  pdl_wait();  // (a warp without k blocks has not waited yet; y may still be read by the previous kernel)
  pdl_launch_dependents();  // only the reduction and the stores are left
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
    for (int q = 0; q < 4; ++q) partial[warp][nt][q][lane] = acc[nt][q];
  __syncthreads();
  // acc[nt][q]: feature n0 + g + 8 (q >> 1), x row nt * 8 + 2t + (q & 1); summed over the warps in order.
  float v[kNT][4];
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      v[nt][q] = 0.0f;
      if (warp == 0) {
#pragma unroll
        for (int w2 = 0; w2 < kWarps; ++w2) v[nt][q] += partial[w2][nt][q][lane];
      }
    }
  if constexpr (kSplit) {
    // Every thread of both CTAs takes part in the two cluster barriers: the first says both are running
    // (the second may write into the first's shared memory), the second that the write has landed.
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();
    if (half == 1 && warp == 0) {
      float* dst = cluster.map_shared_rank(&peer[0][0][0], 0);
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
        for (int q = 0; q < 4; ++q) dst[(nt * 4 + q) * 32 + lane] = v[nt][q];
    }
    cluster.sync();
    if (half == 1) return;
    if (warp == 0) {
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
        for (int q = 0; q < 4; ++q) v[nt][q] += peer[nt][q][lane];  // first half + second half
    }
  }
  if (warp != 0) return;
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int col = n0 + g + 8 * (q >> 1), row = nt * 8 + 2 * t + (q & 1);
      if (col >= a.n || row >= a.m) continue;
      if constexpr (kF32Out) {
        float* y = static_cast<float*>(a.y) + int64_t(row) * ldy + col;
        float r = v[nt][q];
        if (a.bias) r += static_cast<const float*>(a.bias)[col];
        *y = a.accumulate ? *y + r : r;
      } else {
        float r = v[nt][q];
        if (a.bias) r += __bfloat162float(static_cast<const __nv_bfloat16*>(a.bias)[col]);
        static_cast<__nv_bfloat16*>(a.y)[int64_t(row) * ldy + col] = __float2bfloat16_rn(r);
      }
    }
  }
}

// ORCHID_SMALL_M_SPLIT=1: split k where the rule below says so (kSplit; off until measured).
bool split_allowed() {
  static const bool on = [] {
    const char* v = std::getenv("ORCHID_SMALL_M_SPLIT");
    return v != nullptr && std::strcmp(v, "1") == 0;
  }();
  return on;
}

template <int kNT, bool kF32Out>
void launch_out(const DenseGemmArgs& a, int64_t ldx, int64_t ldy, cudaStream_t stream) {
  const int tiles = (a.n + 15) / 16;
  // Split where the tiles would not fill two CTAs an SM, and each half keeps whole kUnroll batches of its
  // warps.
  if (split_allowed() && tiles < 2 * device_info().sm_count && a.k >= 2 * kWarps * small_m::kUnroll * 32)
    launch_pdl_cluster(small_m_gemm_kernel<kNT, kF32Out, true>, dim3(2 * tiles), dim3(kWarps * 32), 0, 2,
                       stream, a, ldx, ldy);
  else
    launch_pdl(small_m_gemm_kernel<kNT, kF32Out, false>, dim3(tiles), dim3(kWarps * 32), 0, stream, a, ldx,
               ldy);
}

template <int kNT>
void launch(const DenseGemmArgs& a, int64_t ldx, int64_t ldy, cudaStream_t stream) {
  if (a.out == GemmOut::kF32)
    launch_out<kNT, true>(a, ldx, ldy, stream);
  else
    launch_out<kNT, false>(a, ldx, ldy, stream);
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
