// How a GPU rank's memory is split (a pure function, so the plan is tested on the CPU): its share of the
// device's budget (--gpu-memory-utilization over the ranks that share the device), then after its weights
// and workspace, the KV pools. The sliding pool holds every running sequence's window plus one step's
// chunk; the full pool takes the rest.
#pragma once

#include <cstddef>
#include <cstdint>

namespace orchid::runtime {

// The bytes one of `ranks_on_device` ranks may use: total * utilization, split evenly. The share is this
// instance's own, as vLLM's --gpu-memory-utilization is: two instances on one GPU (a prefill and a decode
// instance, or a target and its draft model) take 0.45 each, whatever the other one holds. Throws
// orchid::Error when the share is more than is free now.
size_t rank_memory_budget(size_t total, size_t free, double utilization, int ranks_on_device);

struct KvPoolInput {
  size_t budget = 0;     // this rank's budget (rank_memory_budget)
  size_t allocated = 0;  // weights + workspace already taken out of it
  // CUDA context share, cuBLASLt, the GEMM timing's L2 flush buffer (2 x L2, dense_gemm.cu), fragmentation
  size_t reserve = size_t(1) << 30;
  int64_t full_layers = 0;      // layers with full attention
  int64_t sliding_units = 0;    // sliding layers, a precise (fp32) layer counting twice
  size_t page_layer_bytes = 0;  // K and V of one page of one BF16 layer on this rank
  int32_t page_size = 16;
  int64_t sliding_window = 0;
  int64_t max_step_tokens = 0, max_step_seqs = 0;
  int64_t max_model_len = 0;
  int32_t kv_pages = 0;  // --kv-pages: the full pool's pages (0: what the budget leaves)
};

struct KvPoolPlan {
  int32_t full_pages = 0, sliding_pages = 0;
  size_t bytes = 0;  // both pools, every layer
};

// Throws orchid::Error (naming the flags to change) when the full pool would not hold one sequence of
// min(max_model_len, 8192) tokens.
KvPoolPlan plan_kv_pools(const KvPoolInput& in);

// Sequences of `tokens` tokens each that the plan's full-attention pool holds at once (the sliding pool is
// sized for every running sequence already).
int64_t sequences_that_fit(const KvPoolPlan& plan, int32_t page_size, int64_t tokens);

}  // namespace orchid::runtime
