#include "runtime/sequence_runner.h"

#include <algorithm>

#include "core/error.h"

namespace orchid::runtime {

SequenceRunner::SequenceRunner(Backend& backend, SamplingParams params)
    : backend_(backend), params_(params) {}

StepOutput SequenceRunner::feed(const std::vector<int32_t>& ids, bool sample, bool all_logits, int32_t chunk,
                                std::vector<float>* logits) {
  const KvCacheSpec spec = backend_.kv_spec();
  const int64_t total = int64_t(history_.size() + ids.size());
  const int64_t pages = (total + spec.page_size - 1) / spec.page_size;
  if (pages > spec.num_full_pages)
    fail("sequence of {} tokens needs {} KV pages of {} tokens; the cache has {}", total, pages,
         spec.page_size, spec.num_full_pages);
  if (chunk <= 0) chunk = int32_t(std::max<size_t>(ids.size(), 1));
  chunk = std::min(chunk, backend_.max_step_tokens());
  StepOutput out;
  for (size_t begin = 0; begin < ids.size(); begin += size_t(chunk)) {
    const size_t end = std::min(ids.size(), begin + size_t(chunk));
    const bool last = end == ids.size();
    StepBatch b;
    b.tokens.assign(ids.begin() + long(begin), ids.begin() + long(end));
    StepSequence s;
    s.num_tokens = int32_t(end - begin);
    s.start_pos = int32_t(history_.size());
    const int32_t need = int32_t((s.start_pos + s.num_tokens + spec.page_size - 1) / spec.page_size);
    // Sliding layers only read the window before the chunk, so their pages form a ring over the sliding pool:
    // logical page k uses slot k mod (pool size); pages wholly before the window are kNoPage.
    const int32_t window_start =
        spec.sliding_window > 0 ? std::max(0, s.start_pos - spec.sliding_window + 1) : 0;
    const int32_t first_live = window_start / spec.page_size;
    if (spec.sliding_window > 0 && need - first_live > spec.num_sliding_pages)
      fail("a chunk of {} tokens needs {} sliding-window KV pages; the pool has {} (use a smaller chunk)",
           s.num_tokens, need - first_live, spec.num_sliding_pages);
    for (int32_t p = 0; p < need; ++p) {
      b.full_page_table.push_back(p);
      b.sliding_page_table.push_back(
          p < first_live || spec.num_sliding_pages == 0 ? kNoPage : p % spec.num_sliding_pages);
    }
    s.num_full_pages = s.num_sliding_pages = need;
    s.sample = sample && last;
    s.sample_index = generated_;
    b.params.push_back(params_);
    if (params_.uses_penalties()) {
      if (prompt_len_ < 0) prompt_len_ = int32_t(history_.size() + ids.size());
      b.history_tokens = history_;
      b.history_tokens.insert(b.history_tokens.end(), ids.begin(), ids.end());
      s.prompt_history_len = std::min<int32_t>(prompt_len_, int32_t(b.history_tokens.size()));
      s.output_history_begin = s.prompt_history_len;
      s.output_history_len = int32_t(b.history_tokens.size()) - s.prompt_history_len;
    }
    b.seqs.push_back(s);
    b.logits = all_logits ? LogitsMode::kAll : LogitsMode::kNone;
    out = backend_.forward(b);
    if (all_logits && logits) logits->insert(logits->end(), out.logits.begin(), out.logits.end());
    history_.insert(history_.end(), b.tokens.begin(), b.tokens.end());
  }
  if (prompt_len_ < 0) prompt_len_ = int32_t(history_.size());
  if (sample) ++generated_;
  return out;
}

}  // namespace orchid::runtime
