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
  // k rounds, not unrolled: a round is a few dozen instructions and runs once a token, so the code's size
  // (fetched cold in a decode step's short kernels) costs more than the loop. Lane j keeps round j's pick.
  unsigned taken = 0;
  float top_v = 0.0f, my_v = 0.0f;
  int my_e = INT_MAX;
#pragma unroll 1
  for (int j = 0; j < top_k; ++j) {
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
    if (j == 0) top_v = bv;
    if (lane == j) {
      my_v = bv;
      my_e = be;
    }
  }
  // Softmax over the selected logits (round 0's is their maximum), summed in round order.
  const float ex = lane < top_k ? expf(my_v - top_v) : 0.0f;
  float sum = 0.0f;
#pragma unroll 1
  for (int j = 0; j < top_k; ++j) sum += __shfl_sync(0xffffffffu, ex, j);
  if (lane < top_k) {
    out_idx[lane] = my_e;
    out_w[lane] = ex / sum;
    if (smem_idx) smem_idx[lane] = my_e;
  }
}

// The top-k of T tokens by one block, from logits [T][E] in shared memory (16-byte aligned), none NaN: thread
// (t, e) counts the experts ranked above e (`better`), and the k with fewer than k above are the token's
// picks, slot = that count. Every token's picks take ~E instructions in parallel, where a warp's k rounds of
// arg-max (topk_one_token) are a chain of ~10 k shuffles. Writes the picks' logits and ids (s_val, s_idx
// [T][k]); after a barrier, topk_weights gives what topk_one_token gives on the same logits, bit for bit.
__device__ __forceinline__ void topk_rank(const float* logits, int num_tokens, int num_experts, int top_k,
                                          float* s_val, int* s_idx) {
  for (int x = threadIdx.x; x < num_tokens * num_experts; x += int(blockDim.x)) {
    const int t = x / num_experts, e = x - t * num_experts;
    const float* row = logits + t * num_experts;
    const float ve = row[e];
    // `better` without branches: experts before e rank above it on a tie, experts after it do not. Four
    // counts, so that a thread's compares are four chains, not one.
    auto ahead = [&](float vf, int before_e) { return int(vf > ve) | (int(vf == ve) & before_e); };
    int above = 0;
    if (num_experts % 4 == 0) {  // rows of 16-byte aligned float4s
      int n0 = 0, n1 = 0, n2 = 0, n3 = 0;
      for (int f = 0; f < num_experts; f += 4) {
        const float4 q = *reinterpret_cast<const float4*>(row + f);
        const int d = e - f;  // f + i < e  <=>  d > i
        n0 += ahead(q.x, int(d > 0));
        n1 += ahead(q.y, int(d > 1));
        n2 += ahead(q.z, int(d > 2));
        n3 += ahead(q.w, int(d > 3));
      }
      above = (n0 + n1) + (n2 + n3);
    } else {
      for (int f = 0; f < num_experts; ++f) above += ahead(row[f], int(f < e));
    }
    if (above < top_k) {
      s_val[t * top_k + above] = ve;
      s_idx[t * top_k + above] = e;
    }
  }
}

// The softmax over each token's picks (slot 0 holds the largest), summed in slot order; reads s_val / s_idx
// of topk_rank after a barrier.
__device__ __forceinline__ void topk_weights(const float* s_val, const int* s_idx, int num_tokens, int top_k,
                                             int* __restrict__ out_idx, float* __restrict__ out_w) {
  for (int x = threadIdx.x; x < num_tokens * top_k; x += int(blockDim.x)) {
    const float* sel = s_val + (x / top_k) * top_k;
    float sum = 0.0f;
    for (int j = 0; j < top_k; ++j) sum += expf(sel[j] - sel[0]);
    out_idx[x] = s_idx[x];
    out_w[x] = expf(s_val[x] - sel[0]) / sum;
  }
}

// The permutation of at most 32 items (a decode batch of up to 32 / top_k tokens), with no barrier: every
// warp holds the items' keys one a lane and every thread answers for key `tid` by a pass over them, so the
// block needs no shared counts and no scans (permute_small's general path takes ~20 block barriers, a few
// microseconds of a one-token layer). Same results as permute_small; blockDim.x >= max(num_keys, num_experts,
// 32). s_idx was written before the caller's barrier.
__device__ __forceinline__ void permute_few(const int* s_idx, int items, int top_k, int num_experts,
                                            KeyMap km, int num_keys, const MoeRouting& out) {
  const int tid = threadIdx.x, lane = tid % 32;
  if (tid - lane >= max(num_keys, num_experts)) return;  // a warp with neither keys nor items (uniform)
  const int my_key = lane < items ? km.key(s_idx[lane]) : -1;
  const unsigned peers = __match_any_sync(0xffffffffu, my_key);
  const bool first = lane < items && __ffs(peers) - 1 == lane;                     // the key's first item
  const unsigned firsts = __ballot_sync(0xffffffffu, first && my_key < km.count);  // one per active key
  // For key tid: items with a smaller key (its offset), whether it has items, active keys below it; for this
  // lane's item: items with a smaller key (its row's base).
  int below = 0, below_mine = 0, active_below = 0;
  bool has = false;
  for (int i = 0; i < items; ++i) {
    const int ki = __shfl_sync(0xffffffffu, my_key, i);
    below += ki < tid;
    has |= ki == tid;
    active_below += ((firsts >> i) & 1u) != 0 && ki < tid;
    below_mine += ki < my_key;
  }
  const int num_active = __popc(firsts);
  if (tid < num_keys) out.offsets[tid] = below;
  if (tid == 0) {
    out.offsets[num_keys] = items;
    *out.num_active = num_active;
  }
  if (has && tid < km.count) out.active[active_below] = tid;
  if (tid < num_experts && tid >= num_active) out.active[tid] = -1;
  if (tid < 32 && lane < items) {
    const int row = below_mine + __popc(peers & ((1u << lane) - 1u));
    const bool local = my_key < km.count;
    out.row_token[row] = lane / top_k;
    out.row_expert[row] = local ? my_key : 0;
    out.slot_row[lane] = local ? row : -1;
  }
}

// Shared memory of permute_small for up to 32 * kMaxWarps items.
template <int kMaxWarps>
struct PermuteSmem {
  int cnt[kMaxWarps][kMoeMaxExperts];  // per group of 32 items and key: items, then the group's first rank
  int tot[kMoeMaxExperts], act[kMoeMaxExperts], own[kMoeMaxExperts];
};

// The stable permutation of a small batch by one block: item i (token i / top_k, slot i % top_k) has expert
// s_idx[i] (shared memory), at most 32 * kMaxWarps items. Every thread of the block calls it; blockDim.x is a
// multiple of 32 and at least kMoeMaxExperts. Item i is lane i % 32 of group i / 32 (a warp of the block
// takes one group a pass: one pass where the block has a thread an item). Writes every array of `out`
// (routing.h).
template <int kMaxWarps>
__device__ __forceinline__ void permute_small(const int* s_idx, int items, int top_k, int num_experts,
                                              KeyMap km, int num_keys, const MoeRouting& out,
                                              PermuteSmem<kMaxWarps>& sm) {
  if (items <= 32) {  // uniform over the block
    permute_few(s_idx, items, top_k, num_experts, km, num_keys, out);
    return;
  }
  const int tid = threadIdx.x, lane = tid % 32, threads = int(blockDim.x);
  const int groups = (items + 31) / 32;
  const unsigned lanes_below = (1u << lane) - 1u;
  for (int x = tid; x < groups * kMoeMaxExperts; x += threads) (&sm.cnt[0][0])[x] = 0;
  __syncthreads();
  for (int base = 0; base < items; base += threads) {  // uniform: whole warps match
    const int i = base + tid;
    const int e = i < items ? km.key(s_idx[i]) : -1;
    const unsigned peers = __match_any_sync(0xffffffffu, e);
    if (e >= 0 && (peers & lanes_below) == 0) sm.cnt[i / 32][e] = __popc(peers);
  }
  __syncthreads();
  if (tid < kMoeMaxExperts) {
    int run = 0;
    if (tid < num_keys) {
      for (int w = 0; w < groups; ++w) {
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
  for (int base = 0; base < items; base += threads) {
    const int i = base + tid;
    const int e = i < items ? km.key(s_idx[i]) : -1;
    const unsigned peers = __match_any_sync(0xffffffffu, e);
    if (e >= 0) {
      const int row = sm.tot[e] - sm.own[e] + sm.cnt[i / 32][e] + __popc(peers & lanes_below);
      const bool local = e < km.count;
      out.row_token[row] = i / top_k;
      out.row_expert[row] = local ? e : 0;
      out.slot_row[i] = local ? row : -1;
    }
  }
}

}  // namespace orchid::kernels::routing_detail
