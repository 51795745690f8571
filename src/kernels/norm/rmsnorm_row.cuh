// The second half of an RMSNorm row held in registers, shared by rmsnorm_residual (rmsnorm.cu) and the MoE
// combine that normalises the next layer's input as it writes the residual (moe_activation.cu): a block per
// row, thread i holding chunks i, i + blockDim.x, ... (kChunks of 8 columns at most), the sum of squares in
// that order, then out = bf16((v * rsqrt(mean + eps)) * gamma) (and out_lo = bf16 of what that rounding
// lost, for the precise layers' split output). The same block shape gives the same bits.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/common/quant.cuh"

namespace orchid::kernels::norm::detail {

inline constexpr int kMaxChunks = 4;
inline constexpr int kMaxThreads = 1024;

// Threads of a row's block: the fewest warps with at most kMaxChunks chunks each (hidden 2880: 96).
inline int row_threads(int64_t hidden) {
  const int n_chunks = int(hidden / 8);
  const int per_thread = (n_chunks + kMaxChunks - 1) / kMaxChunks;
  return ((per_thread + 31) / 32) * 32;
}

// v[c] is chunk threadIdx.x + c * blockDim.x of the row (chunks past hidden / 8 are not read). Every thread
// of the block calls it (it synchronises the block once).
template <int kChunks>
__device__ __forceinline__ void rmsnorm_row(const float (&v)[kChunks][8], int hidden, const float* gamma,
                                            float eps, __nv_bfloat16* out_row, __nv_bfloat16* out_lo_row) {
  const int n_chunks = hidden >> 3;
  float ss = 0.0f;
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    if (int(threadIdx.x) + c * int(blockDim.x) < n_chunks) {
#pragma unroll
      for (int e = 0; e < 8; ++e) ss = fmaf(v[c][e], v[c][e], ss);
    }
  }
  // Block sum of squares: warp shuffles, then one value per warp through shared memory.
  __shared__ float warp_sums[kMaxThreads / 32];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (lane == 0) warp_sums[warp] = ss;
  __syncthreads();
  const int n_warps = blockDim.x >> 5;
  float total = lane < n_warps ? warp_sums[lane] : 0.0f;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) total += __shfl_xor_sync(0xffffffffu, total, o);
  const float r = rsqrtf(total / float(hidden) + eps);

#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int idx = threadIdx.x + c * blockDim.x;
    if (idx < n_chunks) {
      const float4 ga = reinterpret_cast<const float4*>(gamma)[2 * idx];
      const float4 gb = reinterpret_cast<const float4*>(gamma)[2 * idx + 1];
      const float g[8] = {ga.x, ga.y, ga.z, ga.w, gb.x, gb.y, gb.z, gb.w};
      float y[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) y[e] = __fmul_rn(__fmul_rn(v[c][e], r), g[e]);
      uint4 o;
      o.x = pack_bf16x2(y[0], y[1]);
      o.y = pack_bf16x2(y[2], y[3]);
      o.z = pack_bf16x2(y[4], y[5]);
      o.w = pack_bf16x2(y[6], y[7]);
      reinterpret_cast<uint4*>(out_row)[idx] = o;
      if (out_lo_row != nullptr) {
        float r8[8];
        bf16x8_to_float(o, r8);
#pragma unroll
        for (int e = 0; e < 8; ++e) r8[e] = __fsub_rn(y[e], r8[e]);  // exact (Sterbenz)
        reinterpret_cast<uint4*>(out_lo_row)[idx] =
            make_uint4(pack_bf16x2(r8[0], r8[1]), pack_bf16x2(r8[2], r8[3]), pack_bf16x2(r8[4], r8[5]),
                       pack_bf16x2(r8[6], r8[7]));
      }
    }
  }
}

}  // namespace orchid::kernels::norm::detail
