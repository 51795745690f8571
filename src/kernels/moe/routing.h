// MoE routing on the device: top-k + softmax over the router logits, then the token permutation that groups
// each expert's (token, slot) pairs into adjacent rows for the grouped GEMMs. Nothing here reads back to the
// host; grids depend only on the token count, so a step can be captured in a CUDA graph per batch bucket.
//
// Layouts (T tokens, E experts, k = top_k, M = T*k permuted rows):
//   topk_idx    int32 [T, k]  experts by descending logit; ties go to the lower expert index
//   topk_w      fp32  [T, k]  softmax over the k selected logits (the same order)
//   offsets     int32 [E+1]   expert e owns permuted rows [offsets[e], offsets[e+1]); offsets[E] = M
//   row_token   int32 [M]     token of each permuted row (rows of one expert in increasing token order)
//   row_expert  int32 [M]     expert of each permuted row
//   slot_row    int32 [M]     permuted row of (token t, slot j) at t*k + j: the inverse map for the combine
//   active      int32 [E]     the experts with at least one row, increasing; num_active int32 [1] counts them
// The permutation is stable (sorted by expert, then by t*k + j), hence deterministic.
//
// Expert parallelism (a rank computes the experts [begin, begin + count) of MoeExpertRange): the permutation
// then covers that rank's experts by local id e - begin: offsets [count + 2], offsets[count] = the local
// rows, after which the rows of every other expert follow (up to offsets[count + 1] = M) with row_expert 0
// and no slot (slot_row -1), so per-row kernels over all M rows stay in bounds and no GEMM or combine reads
// them; active lists local ids. topk_idx and topk_w keep the global expert ids.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace orchid::kernels {

constexpr int kMoeMaxExperts = 256;
constexpr int kMoeMaxTopK = 8;

// logits: fp32 [T, E] (the router GEMM output, bias included). E <= kMoeMaxExperts, k <= min(E, kMoeMaxTopK).
// Split router (moe_forward with a split input): logits and logits_lo are the GEMM outputs of the hi and lo
// halves without bias, and the logit of (t, e) is (logits + logits_lo) + bias[e].
void moe_topk_softmax(const float* logits, int num_tokens, int num_experts, int top_k, int* topk_idx,
                      float* topk_w, cudaStream_t stream, const float* logits_lo = nullptr,
                      const float* bias = nullptr);

struct MoeExpertRange {
  int begin = 0;
  int count = 0;  // 0: every expert
};

struct MoeRouting {
  int* offsets = nullptr;     // [E+1]
  int* row_token = nullptr;   // [M]
  int* row_expert = nullptr;  // [M]
  int* slot_row = nullptr;    // [M]
  int* active = nullptr;      // [E]
  int* num_active = nullptr;  // [1]
};

// Scratch for moe_permute (device, 16-byte aligned).
size_t moe_permute_scratch_bytes(int num_tokens, int num_experts, int top_k);

void moe_permute(const int* topk_idx, int num_tokens, int num_experts, int top_k, const MoeRouting& out,
                 void* scratch, cudaStream_t stream, MoeExpertRange range = {});

// moe_topk_softmax + moe_permute. For small batches (num_tokens * top_k <= moe_route_fused_max_items()) both
// run in one single-CTA kernel (one launch instead of four); results are identical. Above that the one CTA
// costs more than the three extra launches: a chain of routings (moe_bench "route", H100) takes 3.5 / 4.4 /
// 5.7 / 9.3 us fused at 8 / 16 / 32 / 64 tokens of 32 experts against ~5.9 for the four kernels (30.6 fused
// at 256), and a 64-token decode step is 1.0% faster on the four kernels. scratch as for moe_permute.
constexpr int kFusedRouteMaxItems = 128;

// kFusedRouteMaxItems, or ORCHID_ROUTE_FUSED_MAX_ITEMS (0-1024; for measuring the paths against each other).
int moe_route_fused_max_items();

void moe_route(const float* logits, int num_tokens, int num_experts, int top_k, int* topk_idx, float* topk_w,
               const MoeRouting& out, void* scratch, cudaStream_t stream, const float* logits_lo = nullptr,
               const float* bias = nullptr, MoeExpertRange range = {});

}  // namespace orchid::kernels
