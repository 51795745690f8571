// The weight stream of small_m_gemm (small_m_gemm.cu), shared with the kernels that put their own epilogue
// after it (kernels/attention/qkv_rope_gemm.cu). A CTA of kWarps warps owns one m16 tile: 16 weight rows,
// of which lane (g, t) feeds rows `row_a` (g) and `row_b` (g + 8) to the MMAs; the warps split k, each
// walking its range in 32-column blocks with kUnroll blocks of 16-byte loads in flight, and the rows of x
// ride along as the MMAs' n8 side. The caller sums the warps' partial tiles.
//
// NOTES: the MMA's k order is free as long as A and B agree: lane t takes the 8 consecutive elements 8t..8t+7
// of a 32-block, elements {0,1},{2,3} form k16 step 0 and {4,5},{6,7} step 1, for W and x alike. So both
// operands are plain 16-byte loads in memory order.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/common/mma_sync.cuh"
#include "kernels/common/pdl.cuh"

namespace orchid::kernels::small_m {

constexpr int kWarps = 8;
constexpr int kUnroll = 8;  // 32-column blocks in flight per warp

__device__ __forceinline__ uint4 ldg_stream(const void* p) {  // weights: read once, keep out of L1
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// acc[nt][q] = this warp's share of k of sum_k W[row][k] x[r][k], row = the row at `wa` (q < 2) or at `wb`
// (q >= 2), x row r = nt * 8 + 2t + (q & 1), for lane (g = lane / 4, t = lane % 4) of warp threadIdx.x / 32.
// wa / wb point at the lane's first 8 elements of its two weight rows (row start + 8t); a row without
// has_a / has_b contributes zeros (its pointer is not read), so do x rows at or past m. x is [m][ldx].
// Programmatic dependent launch (kernels/common/pdl.cuh): the weights are no earlier kernel's output, so
// the first kUnroll blocks of them are requested before waiting for the previous kernel (x is its output);
// a warp without k blocks does not wait here, so the caller waits again before touching outputs.
template <int kNT>
__device__ __forceinline__ void accumulate(const __nv_bfloat16* wa, const __nv_bfloat16* wb, bool has_a,
                                           bool has_b, const __nv_bfloat16* x, int64_t ldx, int m, int k,
                                           float (&acc)[kNT][4]) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int kblocks = k / 32;
  const int kb0 = warp * kblocks / kWarps, kb1 = (warp + 1) * kblocks / kWarps;
  const __nv_bfloat16* xr[kNT];
  bool xv[kNT];
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt) {
    xv[nt] = nt * 8 + g < m;
    xr[nt] = x + (xv[nt] ? int64_t(nt * 8 + g) * ldx : 0) + 8 * t;
  }
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.0f;
  const uint4 zero = make_uint4(0, 0, 0, 0);
  for (int kb = kb0; kb < kb1; kb += kUnroll) {
    uint4 A[kUnroll], B[kUnroll], X[kUnroll][kNT];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const bool in = kb + u < kb1;
      const int64_t off = int64_t(kb + u) * 32;
      A[u] = in && has_a ? ldg_stream(wa + off) : zero;
      B[u] = in && has_b ? ldg_stream(wb + off) : zero;
    }
    if (kb == kb0) pdl_wait();
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {  // every load of kUnroll blocks first, then the MMAs
      const bool in = kb + u < kb1;
      const int64_t off = int64_t(kb + u) * 32;
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
        X[u][nt] = in && xv[nt] ? *reinterpret_cast<const uint4*>(xr[nt] + off) : zero;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
        mma_m16n8k16_bf16(acc[nt], A[u].x, B[u].x, A[u].y, B[u].y, X[u][nt].x, X[u][nt].y);
        mma_m16n8k16_bf16(acc[nt], A[u].z, B[u].z, A[u].w, B[u].w, X[u][nt].z, X[u][nt].w);
      }
    }
  }
}

}  // namespace orchid::kernels::small_m
