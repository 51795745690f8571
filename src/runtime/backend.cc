#include "runtime/backend.h"

#include <algorithm>

#include "core/error.h"

namespace orchid::runtime {

std::vector<float> Backend::run_layer(int64_t, const std::vector<float>&, int64_t, std::vector<int32_t>*) {
  fail("the {} backend cannot run a single layer", name());
}

StepBatch single_sequence_batch(const KvCacheSpec& spec, int32_t n) {
  StepBatch b;
  b.tokens.assign(static_cast<size_t>(n), 0);
  StepSequence s;
  s.num_tokens = n;
  const int32_t pages = (n + spec.page_size - 1) / spec.page_size;
  if (pages > spec.num_full_pages || (spec.sliding_window > 0 && pages > spec.num_sliding_pages))
    fail("{} tokens need {} KV pages; the cache has {} (full) / {} (sliding)", n, pages, spec.num_full_pages,
         spec.num_sliding_pages);
  for (int32_t p = 0; p < pages; ++p) {
    b.full_page_table.push_back(p);
    b.sliding_page_table.push_back(spec.sliding_window > 0 ? p : kNoPage);
  }
  s.num_full_pages = s.num_sliding_pages = pages;
  b.seqs.push_back(s);
  b.params.emplace_back();
  return b;
}

}  // namespace orchid::runtime
