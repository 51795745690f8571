#include "runtime/graph_buckets.h"

#include <algorithm>

namespace orchid::runtime {

int32_t decode_graph_bucket(int64_t B, int32_t q, int32_t max_step_seqs, int32_t max_step_tokens) {
  int32_t bucket = 0;
  for (int32_t x : kDecodeGraphBuckets)
    if (x >= B) {
      bucket = x;
      break;
    }
  return int32_t(std::min<int64_t>({bucket, max_step_seqs, max_step_tokens / std::max(q, 1)}));
}

std::vector<int32_t> decode_graph_batches(int32_t max_step_seqs, int32_t max_step_tokens) {
  std::vector<int32_t> out;
  const int64_t most = std::min({max_step_seqs, max_step_tokens, kMaxDecodeGraphBatch});
  for (int64_t B = 1; B <= most; ++B) {  // the buckets are few; so are the batch sizes
    const int32_t bucket = decode_graph_bucket(B, 1, max_step_seqs, max_step_tokens);
    if (bucket >= 1 && (out.empty() || out.back() != bucket)) out.push_back(bucket);
  }
  return out;
}

}  // namespace orchid::runtime
