// The batch buckets of captured decode steps: a plain decode or verify step of B sequences of q tokens each
// replays the CUDA graph captured for the first bucket that holds B (padding slots are inert), so a serving
// run meets a handful of graphs, all of which the start-up warm-up can capture
// (Backend::decode_graph_batches).
#pragma once

#include <cstdint>
#include <iterator>
#include <vector>

namespace orchid::runtime {

inline constexpr int32_t kDecodeGraphBuckets[] = {1, 2, 4, 8, 16, 32, 64, 128, 256};
// The largest bucket: steps of more sequences run eagerly.
inline constexpr int32_t kMaxDecodeGraphBatch = kDecodeGraphBuckets[std::size(kDecodeGraphBuckets) - 1];

// The bucket of a step of B sequences of q tokens: the first of kDecodeGraphBuckets that holds B, no more
// than a step may carry (max_step_seqs sequences, max_step_tokens tokens).
int32_t decode_graph_bucket(int64_t B, int32_t q, int32_t max_step_seqs, int32_t max_step_tokens);

// Every bucket a plain decode step (q = 1) may take, smallest first: steps of 1 .. min(max_step_seqs,
// max_step_tokens, kMaxDecodeGraphBatch) sequences.
std::vector<int32_t> decode_graph_batches(int32_t max_step_seqs, int32_t max_step_tokens);

}  // namespace orchid::runtime
