// Start-up warm-up of a serving backend: runs once what the first requests would run (prefills of 128 tokens
// and of the backend's prefill_warm_up_lengths, then decode steps greedy and sampled at every graph batch
// size) so that requests do not pay the one-time costs:
// loading the kernels' modules, choosing and timing the GEMM algorithms per shape, capturing the decode CUDA
// graphs (on an H200 the first request after start-up, a 128-token prompt, took 246 ms to its first token,
// where a whole 8192-token prefill takes 92 ms: bench/RESULTS.md, 2026-12-04; a first wave of 64 users paid
// the batch-64 graph's capture the same way).
#pragma once

#include "runtime/backend.h"

namespace orchid::runtime {

// Returns the seconds it took. Decode graphs of up to max_batch sequences (Backend::decode_graph_batches).
// Uses the first KV pages of each pool and leaves nothing allocated: call it before an engine owns the
// backend.
// Prompts stay within max_sequence tokens with their decode steps (the caller's --max-model-len, where the
// backend refuses longer sequences).
double warm_up(Backend& backend, int32_t max_batch = 1 << 30, int64_t max_sequence = int64_t(1) << 40);

// The longest prompt warm_up feeds this backend (for its log line).
int32_t longest_warm_up_prompt(const Backend& backend, int64_t max_sequence = int64_t(1) << 40);

}  // namespace orchid::runtime
