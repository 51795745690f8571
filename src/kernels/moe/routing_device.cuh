// Device pieces of MoE routing shared by the routing kernels (routing.cu) and the fused post-attention
// kernel (norm_route.cu): the order on (logit, expert), the key map of an expert range, one token's top-k +
// softmax by a warp, and the whole permutation of a small batch by one block. routing.h has the layouts.
#pragma once

#include <cuda_runtime.h>

#include <climits>

#include "kernels/common/cuda_check.h"
#include "kernels/moe/routing.h"

namespace orchid::kernels::routing_detail {

// Strict order on (logit, expert): larger logit first, ties to the lower expert; `eb == INT_MAX` is "none".
__device__ __forceinline__ bool better(float va, int ea, float vb, int eb) {
  return ea != INT_MAX && (eb == INT_MAX || va > vb || (va == vb && ea < eb));
}

// Expert parallelism: the permutation groups the rows of the local experts [begin, begin + count) by local
// id; every other expert maps to one key after them (`count`), whose rows no GEMM reads. Without a range
// (count == num_experts) keys are the expert ids.
struct KeyMap {
  int begin, count;
  __device__ __forceinline__ int key(int e) const {
    const int k = e - begin;
    return k >= 0 && k < count ? k : count;
  }
};

// The keys of an expert range (host side, for a launch); checks the range.
inline KeyMap key_map(int num_experts, MoeExpertRange range, int* num_keys) {
  const int count = range.count > 0 ? range.count : num_experts;
  ORCHID_KERNEL_REQUIRE(range.begin >= 0 && range.begin + count <= num_experts,
                        "moe routing: expert range outside the experts");
  *num_keys = count + (count < num_experts ? 1 : 0);
  return KeyMap{range.begin, count};
}

// One warp computes one token's top-k; lane l holds experts l, l+32, ... in registers; k rounds of warp
// arg-max. Lane j < k writes slot j (and, when given, mirrors the expert id into shared memory).
// The logits of one token: row[e], or with the split router (row_lo given) (row[e] + row_lo[e]) + bias[e].
template <int kPerLane>
__device__ __forceinline__ void topk_one_token(const float* __restrict__ row,
                                               const float* __restrict__ row_lo,
                                               const float* __restrict__ bias, int num_experts, int top_k,
                                               int lane, int* __restrict__ out_idx, float* __restrict__ out_w,
                                               int* smem_idx) {
  float v[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int e = lane + 32 * i;
    v[i] = e < num_experts ? row[e] : 0.0f;
    if (row_lo != nullptr && e < num_experts) v[i] = (v[i] + row_lo[e]) + bias[e];
  }
  unsigned taken = 0;
  float sel_v[kMoeMaxTopK];
  int sel_e[kMoeMaxTopK];
#pragma unroll
  for (int j = 0; j < kMoeMaxTopK; ++j) {
    if (j >= top_k) break;
    float bv = 0.0f;
    int be = INT_MAX;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int e = lane + 32 * i;
      if (e < num_experts && !((taken >> i) & 1u) && better(v[i], e, bv, be)) {
        bv = v[i];
        be = e;
      }
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, bv, off);
      const int oe = __shfl_xor_sync(0xffffffffu, be, off);
      if (better(ov, oe, bv, be)) {
        bv = ov;
        be = oe;
      }
    }
    if (be % 32 == lane) taken |= 1u << (be / 32);
    sel_v[j] = bv;
    sel_e[j] = be;
  }
  // Softmax over the selected logits; sel_v[0] is their maximum.
  float ex[kMoeMaxTopK];
  float sum = 0.0f;
#pragma unroll
  for (int j = 0; j < kMoeMaxTopK; ++j) {
    if (j >= top_k) break;
    ex[j] = expf(sel_v[j] - sel_v[0]);
    sum += ex[j];
  }
#pragma unroll
  for (int j = 0; j < kMoeMaxTopK; ++j) {
    if (j >= top_k) break;
    if (lane == j) {
      out_idx[j] = sel_e[j];
      out_w[j] = ex[j] / sum;
      if (smem_idx) smem_idx[j] = sel_e[j];
    }
  }
}

// Shared memory of permute_small for blocks of up to kMaxWarps warps.
template <int kMaxWarps>
struct PermuteSmem {
  int cnt[kMaxWarps][kMoeMaxExperts];  // per warp and key: items, then the warp's first rank
  int tot[kMoeMaxExperts], act[kMoeMaxExperts], own[kMoeMaxExperts];
};

// The stable permutation of a small batch by one block: item i (token i / top_k, slot i % top_k) has expert
// s_idx[i] (shared memory). Every thread of the block calls it; blockDim.x is a multiple of 32, at most
// 32 * kMaxWarps, and at least max(items, kMoeMaxExperts). Writes every array of `out` (routing.h).
template <int kMaxWarps>
__device__ __forceinline__ void permute_small(const int* s_idx, int items, int top_k, int num_experts,
                                              KeyMap km, int num_keys, const MoeRouting& out,
                                              PermuteSmem<kMaxWarps>& sm) {
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, warps = int(blockDim.x) / 32;
  for (int x = tid; x < warps * kMoeMaxExperts; x += int(blockDim.x)) (&sm.cnt[0][0])[x] = 0;
  __syncthreads();
  const int e = tid < items ? km.key(s_idx[tid]) : -1;
  const unsigned peers = __match_any_sync(0xffffffffu, e);
  const int rank = __popc(peers & ((1u << lane) - 1u));
  if (e >= 0 && rank == 0) sm.cnt[warp][e] = __popc(peers);
  __syncthreads();
  if (tid < kMoeMaxExperts) {
    int run = 0;
    if (tid < num_keys) {
      for (int w = 0; w < warps; ++w) {
        const int c = sm.cnt[w][tid];
        sm.cnt[w][tid] = run;
        run += c;
      }
    }
    sm.own[tid] = run;
    sm.tot[tid] = run;
    sm.act[tid] = run > 0 && tid < km.count ? 1 : 0;
  }
  __syncthreads();
  // Inclusive Hillis-Steele scans over the keys (256 entries: 8 steps).
  for (int d = 1; d < kMoeMaxExperts; d <<= 1) {
    int a = 0, b = 0;
    if (tid < kMoeMaxExperts && tid >= d) {
      a = sm.tot[tid - d];
      b = sm.act[tid - d];
    }
    __syncthreads();
    if (tid < kMoeMaxExperts) {
      sm.tot[tid] += a;
      sm.act[tid] += b;
    }
    __syncthreads();
  }
  if (tid < num_keys) {
    out.offsets[tid] = sm.tot[tid] - sm.own[tid];
    if (tid == num_keys - 1) {
      out.offsets[num_keys] = sm.tot[tid];
      *out.num_active = sm.act[tid];
    }
    if (sm.own[tid] > 0 && tid < km.count) out.active[sm.act[tid] - 1] = tid;
  }
  if (tid < num_experts && tid >= sm.act[num_keys - 1]) out.active[tid] = -1;
  if (e >= 0) {
    const int row = sm.tot[e] - sm.own[e] + sm.cnt[warp][e] + rank;
    const bool local = e < km.count;
    out.row_token[row] = tid / top_k;
    out.row_expert[row] = local ? e : 0;
    out.slot_row[tid] = local ? row : -1;
  }
}

}  // namespace orchid::kernels::routing_detail
