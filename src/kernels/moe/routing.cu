// Router top-k + softmax, and the stable token permutation (see routing.h for the layouts).
//
// Napkin math: at 32768 prefill tokens and E = 32 the logits are 4 MB and the index arrays ~2 MB, a few
// microseconds of HBM traffic per layer; these kernels are launch- and latency-bound, not bandwidth-bound.
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>
#include <cstdlib>

#include "kernels/common/cuda_check.h"
#include "kernels/common/pdl.cuh"
#include "kernels/moe/routing.h"
#include "kernels/moe/routing_device.cuh"

namespace orchid::kernels {
namespace {

using namespace routing_detail;

constexpr int kPermuteChunk = 1024;  // items per counting block (one per thread)

template <int kPerLane>
__global__ void topk_softmax_kernel(const float* __restrict__ logits, const float* __restrict__ logits_lo,
                                    const float* __restrict__ bias, int num_tokens, int num_experts,
                                    int top_k, int* __restrict__ topk_idx, float* __restrict__ topk_w) {
  pdl_wait();  // programmatic dependent launch (kernels/common/pdl.cuh)
  const int token = int((blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / 32);
  const int lane = threadIdx.x % 32;
  if (token >= num_tokens) return;
  const int64_t at = int64_t(token) * num_experts;
  topk_one_token<kPerLane>(logits + at, logits_lo ? logits_lo + at : nullptr, bias, num_experts, top_k, lane,
                           topk_idx + int64_t(token) * top_k, topk_w + int64_t(token) * top_k, nullptr);
}

// Pass 1: per chunk of 1024 items, each item's stable rank among the chunk's items of the same expert, and
// the chunk's per-expert counts.
__global__ void __launch_bounds__(kPermuteChunk)
    permute_count_kernel(const int* __restrict__ topk_idx, int num_items, KeyMap km, int num_keys,
                         int* __restrict__ local_rank, int* __restrict__ chunk_counts) {
  pdl_wait();  // programmatic dependent launch (kernels/common/pdl.cuh)
  __shared__ int cnt[kPermuteChunk / 32][kMoeMaxExperts];
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  for (int x = tid; x < (kPermuteChunk / 32) * kMoeMaxExperts; x += kPermuteChunk) (&cnt[0][0])[x] = 0;
  __syncthreads();
  const int item = blockIdx.x * kPermuteChunk + tid;
  const int e = item < num_items ? km.key(topk_idx[item]) : -1;
  const unsigned peers = __match_any_sync(0xffffffffu, e);
  const int rank = __popc(peers & ((1u << lane) - 1u));
  if (e >= 0 && rank == 0) cnt[warp][e] = __popc(peers);
  __syncthreads();
  for (int x = tid; x < num_keys; x += kPermuteChunk) {
    int run = 0;
    for (int w = 0; w < kPermuteChunk / 32; ++w) {
      const int c = cnt[w][x];
      cnt[w][x] = run;
      run += c;
    }
    chunk_counts[int64_t(blockIdx.x) * num_keys + x] = run;
  }
  __syncthreads();
  if (e >= 0) local_rank[item] = cnt[warp][e] + rank;
}

// Pass 2 (one block, thread e = key): chunk counts -> exclusive chunk bases per key, key offsets, and the
// compact list of non-empty local experts (keys below `num_local`).
__global__ void __launch_bounds__(kMoeMaxExperts)
    permute_offsets_kernel(int* __restrict__ chunk_counts, int num_chunks, int num_experts, int num_local,
                           int* __restrict__ offsets, int* __restrict__ active,
                           int* __restrict__ num_active) {
  pdl_wait();  // programmatic dependent launch (kernels/common/pdl.cuh)
  __shared__ int s_tot[kMoeMaxExperts], s_act[kMoeMaxExperts];
  const int e = threadIdx.x;
  int total = 0;
  if (e < num_experts) {
    for (int c = 0; c < num_chunks; ++c) {
      int* p = chunk_counts + int64_t(c) * num_experts + e;
      const int n = *p;
      *p = total;
      total += n;
    }
  }
  s_tot[e] = total;
  s_act[e] = total > 0 && e < num_local ? 1 : 0;
  __syncthreads();
  // Inclusive Hillis-Steele scans over the keys (256 entries: 8 steps).
  for (int d = 1; d < kMoeMaxExperts; d <<= 1) {
    const int a = e >= d ? s_tot[e - d] : 0;
    const int b = e >= d ? s_act[e - d] : 0;
    __syncthreads();
    s_tot[e] += a;
    s_act[e] += b;
    __syncthreads();
  }
  if (e < num_experts) {
    offsets[e] = s_tot[e] - total;
    if (e == num_experts - 1) {
      offsets[num_experts] = s_tot[e];
      *num_active = s_act[e];
    }
    if (total > 0 && e < num_local) active[s_act[e] - 1] = e;
    if (e >= s_act[num_experts - 1]) active[e] = -1;
  }
}

// Pass 3: final row of every item, and the maps in both directions.
// Rows of other ranks' experts get expert 0 (in range for every per-row kernel) and no slot.
__global__ void permute_scatter_kernel(const int* __restrict__ topk_idx, int num_items, KeyMap km,
                                       int num_keys, int top_k, const int* __restrict__ local_rank,
                                       const int* __restrict__ chunk_base, const int* __restrict__ offsets,
                                       int* __restrict__ row_token, int* __restrict__ row_expert,
                                       int* __restrict__ slot_row) {
  pdl_wait();  // programmatic dependent launch (kernels/common/pdl.cuh)
  const int item = blockIdx.x * blockDim.x + threadIdx.x;
  if (item >= num_items) return;
  const int e = km.key(topk_idx[item]);
  const int chunk = item / kPermuteChunk;
  const int row = offsets[e] + chunk_base[int64_t(chunk) * num_keys + e] + local_rank[item];
  const bool local = e < km.count;
  row_token[row] = item / top_k;
  row_expert[row] = local ? e : 0;
  slot_row[item] = local ? row : -1;
}

// Small batches (T*k <= kFusedRouteMaxItems): top-k and the whole permutation in one CTA of 1024 threads, one
// launch instead of four (launch gaps dominate a decode step's routing). Same results as the general path.
template <int kPerLane>
__global__ void __launch_bounds__(kPermuteChunk)
    route_small_kernel(const float* __restrict__ logits, const float* __restrict__ logits_lo,
                       const float* __restrict__ bias, int num_tokens, int num_experts, int top_k, KeyMap km,
                       int num_keys, int* __restrict__ topk_idx, float* __restrict__ topk_w, MoeRouting out) {
  pdl_wait();  // programmatic dependent launch (kernels/common/pdl.cuh)
  __shared__ PermuteSmem<kPermuteChunk / 32> psm;
  __shared__ int s_idx[kPermuteChunk];
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int items = num_tokens * top_k;
  for (int t = warp; t < num_tokens; t += kPermuteChunk / 32)
    topk_one_token<kPerLane>(logits + int64_t(t) * num_experts,
                             logits_lo ? logits_lo + int64_t(t) * num_experts : nullptr, bias, num_experts,
                             top_k, lane, topk_idx + int64_t(t) * top_k, topk_w + int64_t(t) * top_k,
                             s_idx + t * top_k);
  __syncthreads();
  permute_small<kPermuteChunk / 32>(s_idx, items, top_k, num_experts, km, num_keys, out, psm);
}

size_t align16(size_t x) {
  return (x + 15) & ~size_t(15);
}

}  // namespace

void moe_topk_softmax(const float* logits, int num_tokens, int num_experts, int top_k, int* topk_idx,
                      float* topk_w, cudaStream_t stream, const float* logits_lo, const float* bias) {
  ORCHID_KERNEL_REQUIRE(logits_lo == nullptr || bias != nullptr,
                        "moe_topk_softmax: split logits need the bias");
  ORCHID_KERNEL_REQUIRE(num_experts > 0 && num_experts <= kMoeMaxExperts,
                        "moe_topk_softmax: bad expert count");
  ORCHID_KERNEL_REQUIRE(top_k > 0 && top_k <= kMoeMaxTopK && top_k <= num_experts,
                        "moe_topk_softmax: bad top_k");
  if (num_tokens <= 0) return;
  const int threads = 128;
  const int blocks = int((int64_t(num_tokens) * 32 + threads - 1) / threads);
  if (num_experts <= 32) {
    launch_pdl(topk_softmax_kernel<1>, dim3(blocks), dim3(threads), 0, stream, logits, logits_lo, bias,
               num_tokens, num_experts, top_k, topk_idx, topk_w);
  } else if (num_experts <= 64) {
    launch_pdl(topk_softmax_kernel<2>, dim3(blocks), dim3(threads), 0, stream, logits, logits_lo, bias,
               num_tokens, num_experts, top_k, topk_idx, topk_w);
  } else if (num_experts <= 128) {
    launch_pdl(topk_softmax_kernel<4>, dim3(blocks), dim3(threads), 0, stream, logits, logits_lo, bias,
               num_tokens, num_experts, top_k, topk_idx, topk_w);
  } else {
    launch_pdl(topk_softmax_kernel<8>, dim3(blocks), dim3(threads), 0, stream, logits, logits_lo, bias,
               num_tokens, num_experts, top_k, topk_idx, topk_w);
  }
  ORCHID_CUDA_CHECK_LAUNCH();
}

size_t moe_permute_scratch_bytes(int num_tokens, int num_experts, int top_k) {
  const int64_t items = int64_t(num_tokens) * top_k;
  const int64_t chunks = (items + kPermuteChunk - 1) / kPermuteChunk;
  return align16(size_t(chunks) * num_experts * sizeof(int)) + align16(size_t(items) * sizeof(int));
}

void moe_permute(const int* topk_idx, int num_tokens, int num_experts, int top_k, const MoeRouting& out,
                 void* scratch, cudaStream_t stream, MoeExpertRange range) {
  ORCHID_KERNEL_REQUIRE(num_experts > 0 && num_experts <= kMoeMaxExperts, "moe_permute: bad expert count");
  int keys = 0;
  const KeyMap km = key_map(num_experts, range, &keys);
  ORCHID_KERNEL_REQUIRE(top_k > 0 && top_k <= kMoeMaxTopK, "moe_permute: bad top_k");
  ORCHID_KERNEL_REQUIRE(out.offsets && out.row_token && out.row_expert && out.slot_row && out.active &&
                            out.num_active && scratch,
                        "moe_permute: null pointer");
  const int64_t items64 = int64_t(num_tokens) * top_k;
  ORCHID_KERNEL_REQUIRE(items64 < (int64_t(1) << 30), "moe_permute: too many tokens");
  const int items = int(items64);
  const int chunks = (items + kPermuteChunk - 1) / kPermuteChunk;
  int* chunk_counts = static_cast<int*>(scratch);
  int* local_rank = reinterpret_cast<int*>(static_cast<char*>(scratch) +
                                           align16(size_t(chunks) * num_experts * sizeof(int)));
  if (chunks > 0) {
    launch_pdl(permute_count_kernel, dim3(chunks), dim3(kPermuteChunk), 0, stream, topk_idx, items, km, keys,
               local_rank, chunk_counts);
    ORCHID_CUDA_CHECK_LAUNCH();
  }
  launch_pdl(permute_offsets_kernel, dim3(1), dim3(kMoeMaxExperts), 0, stream, chunk_counts, chunks, keys,
             km.count, out.offsets, out.active, out.num_active);
  ORCHID_CUDA_CHECK_LAUNCH();
  if (items > 0) {
    launch_pdl(permute_scatter_kernel, dim3((items + 255) / 256), dim3(256), 0, stream, topk_idx, items, km,
               keys, top_k, local_rank, chunk_counts, out.offsets, out.row_token, out.row_expert,
               out.slot_row);
    ORCHID_CUDA_CHECK_LAUNCH();
  }
}

int moe_route_fused_max_items() {
  static const int limit = [] {
    const char* v = std::getenv("ORCHID_ROUTE_FUSED_MAX_ITEMS");
    if (v == nullptr) return kFusedRouteMaxItems;
    char* end = nullptr;
    const long n = std::strtol(v, &end, 10);
    // The fused kernel's block has a thread an item: at most kPermuteChunk.
    return end != v && *end == '\0' && n >= 0 && n <= kPermuteChunk ? int(n) : kFusedRouteMaxItems;
  }();
  return limit;
}

void moe_route(const float* logits, int num_tokens, int num_experts, int top_k, int* topk_idx, float* topk_w,
               const MoeRouting& out, void* scratch, cudaStream_t stream, const float* logits_lo,
               const float* bias, MoeExpertRange range) {
  ORCHID_KERNEL_REQUIRE(logits_lo == nullptr || bias != nullptr, "moe_route: split logits need the bias");
  ORCHID_KERNEL_REQUIRE(num_experts > 0 && num_experts <= kMoeMaxExperts, "moe_route: bad expert count");
  ORCHID_KERNEL_REQUIRE(top_k > 0 && top_k <= kMoeMaxTopK && top_k <= num_experts, "moe_route: bad top_k");
  if (int64_t(num_tokens) * top_k > moe_route_fused_max_items() || num_tokens <= 0) {
    moe_topk_softmax(logits, num_tokens, num_experts, top_k, topk_idx, topk_w, stream, logits_lo, bias);
    moe_permute(topk_idx, num_tokens, num_experts, top_k, out, scratch, stream, range);
    return;
  }
  int keys = 0;
  const KeyMap km = key_map(num_experts, range, &keys);
  ORCHID_KERNEL_REQUIRE(
      out.offsets && out.row_token && out.row_expert && out.slot_row && out.active && out.num_active,
      "moe_route: null pointer");
  if (num_experts <= 32) {
    launch_pdl(route_small_kernel<1>, dim3(1), dim3(kPermuteChunk), 0, stream, logits, logits_lo, bias,
               num_tokens, num_experts, top_k, km, keys, topk_idx, topk_w, out);
  } else if (num_experts <= 64) {
    launch_pdl(route_small_kernel<2>, dim3(1), dim3(kPermuteChunk), 0, stream, logits, logits_lo, bias,
               num_tokens, num_experts, top_k, km, keys, topk_idx, topk_w, out);
  } else if (num_experts <= 128) {
    launch_pdl(route_small_kernel<4>, dim3(1), dim3(kPermuteChunk), 0, stream, logits, logits_lo, bias,
               num_tokens, num_experts, top_k, km, keys, topk_idx, topk_w, out);
  } else {
    launch_pdl(route_small_kernel<8>, dim3(1), dim3(kPermuteChunk), 0, stream, logits, logits_lo, bias,
               num_tokens, num_experts, top_k, km, keys, topk_idx, topk_w, out);
  }
  ORCHID_CUDA_CHECK_LAUNCH();
}

}  // namespace orchid::kernels
