#include "engine/batch_builder.h"

#include <algorithm>

#include "core/error.h"

namespace orchid::engine {

using runtime::kNoPage;

BatchBuilder::BatchBuilder(bool has_sliding, runtime::LogitsMode logits) : has_sliding_(has_sliding) {
  batch_.logits = logits;
}

void BatchBuilder::drop(Sequence* s) {
  if (s->region.begin < 0) return;
  garbage_ += s->region.capacity;
  s->region = {};
}

void BatchBuilder::truncated(Sequence* s) {
  auto& r = s->region;
  if (r.begin < 0) return;
  r.full_synced = std::min(r.full_synced, int32_t(s->pages.full.size()));
  r.sliding_synced = std::min(r.sliding_synced, int32_t(s->pages.sliding.size()));
}

void BatchBuilder::place(Sequence* s) {
  drop(s);
  const int32_t n = int32_t(s->pages.full.size());
  auto& r = s->region;
  r.begin = int32_t(batch_.full_page_table.size());
  r.capacity = n + std::max(16, n / 4);  // room to grow for a while without moving
  batch_.full_page_table.resize(size_t(r.begin + r.capacity), kNoPage);
  std::copy(s->pages.full.begin(), s->pages.full.end(), batch_.full_page_table.begin() + r.begin);
  r.full_synced = n;
  if (has_sliding_) {
    batch_.sliding_page_table.resize(size_t(r.begin + r.capacity), kNoPage);
    std::copy(s->pages.sliding.begin(), s->pages.sliding.end(), batch_.sliding_page_table.begin() + r.begin);
    r.sliding_synced = int32_t(s->pages.sliding.size());
    r.sliding_begin_synced = s->pages.sliding_begin;
  }
}

void BatchBuilder::sync_tables(Sequence* s) {
  auto& r = s->region;
  const SeqPages& pages = s->pages;
  const int32_t n = int32_t(pages.full.size());
  if (r.begin < 0 || n > r.capacity) {
    place(s);
    return;
  }
  // Full tables only grow (a shrink lowered the synced mark: truncated()).
  std::copy(pages.full.begin() + r.full_synced, pages.full.end(),
            batch_.full_page_table.begin() + r.begin + r.full_synced);
  r.full_synced = n;
  if (has_sliding_) {
    // Sliding tables grow at the end and lose pages at the front.
    auto table = batch_.sliding_page_table.begin() + r.begin;
    const int32_t released_end = std::min(pages.sliding_begin, r.sliding_synced);
    if (released_end > r.sliding_begin_synced)
      std::fill(table + r.sliding_begin_synced, table + released_end, kNoPage);
    std::copy(pages.sliding.begin() + r.sliding_synced, pages.sliding.end(), table + r.sliding_synced);
    r.sliding_synced = int32_t(pages.sliding.size());
    r.sliding_begin_synced = pages.sliding_begin;
  }
}

void BatchBuilder::compact(const std::vector<Sequence*>& holders) {
  batch_.full_page_table.clear();
  batch_.sliding_page_table.clear();
  for (Sequence* s : holders) s->region = {};
  garbage_ = 0;
  for (Sequence* s : holders)
    if (s->pages.holds_pages()) place(s);
}

void BatchBuilder::start(const std::vector<Sequence*>& holders, size_t num_seqs) {
  if (garbage_ > 4096 && garbage_ * 2 > int64_t(batch_.full_page_table.size())) compact(holders);
  runtime::StepBatch& b = batch_;
  b.tokens.clear();
  b.seqs.clear();
  b.params.clear();
  b.history_tokens.clear();
  b.banned_tokens.clear();
  b.from_previous.clear();
  b.history_from_previous.clear();
  b.seqs.reserve(num_seqs);
  b.params.reserve(num_seqs);
}

runtime::StepSequence BatchBuilder::sequence(const ScheduledSeq& e) {
  runtime::StepBatch& b = batch_;
  Sequence* s = e.seq;
  sync_tables(s);
  runtime::StepSequence ss;
  ss.seq_id = s->id;
  ss.token_begin = int32_t(b.tokens.size());
  ss.num_tokens = e.num_tokens;
  ss.start_pos = s->computed_ahead();
  ss.num_draft = e.num_draft;
  ss.full_table_begin = s->region.begin;
  ss.num_full_pages = int32_t(s->pages.full.size());
  if (has_sliding_) {
    ss.sliding_table_begin = s->region.begin;
    ss.num_sliding_pages = int32_t(s->pages.sliding.size());
  }
  ss.sample = e.sample;
  ss.sample_index = s->outputs_ahead();
  ss.params_index = int32_t(b.params.size());
  b.params.push_back(s->params);
  // A constrained request's own mask decides when it may end (min_tokens does not apply to it).
  if (e.sample && !s->constraint && s->stop.bans_stop_ids(s->outputs_ahead())) {
    const auto& ids = s->stop.config().stop_ids;
    ss.banned_begin = int32_t(b.banned_tokens.size());
    ss.num_banned = int32_t(ids.size());
    b.banned_tokens.insert(b.banned_tokens.end(), ids.begin(), ids.end());
  }
  return ss;
}

const runtime::StepBatch& BatchBuilder::build(const std::vector<ScheduledSeq>& plan,
                                              const std::vector<Sequence*>& holders) {
  start(holders, plan.size());
  runtime::StepBatch& b = batch_;
  for (const ScheduledSeq& e : plan) {
    Sequence* s = e.seq;
    runtime::StepSequence ss = sequence(e);
    // The fed tokens; the last of them may be the one a launched step draws (asynchronous scheduling).
    const int32_t begin = s->computed_ahead(), end = begin + e.num_tokens - e.num_draft;
    const int32_t known = int32_t(s->tokens.size());
    b.tokens.insert(b.tokens.end(), s->tokens.begin() + begin, s->tokens.begin() + std::min(end, known));
    if (end > known) {
      ORCHID_CHECK(end == known + 1 && s->ahead_sample >= 0, "sequence {}: tokens {}..{} of {} known", s->id,
                   begin, end, known);
      b.from_previous.push_back({int32_t(b.tokens.size()), s->ahead_sample});
      b.tokens.push_back(0);
    }
    ORCHID_CHECK(e.num_draft <= int32_t(s->draft.size()) && (e.num_draft == 0 || e.sample));
    b.tokens.insert(b.tokens.end(), s->draft.begin(), s->draft.begin() + e.num_draft);
    if (e.sample && s->params.uses_penalties()) {
      ss.prompt_history_begin = int32_t(b.history_tokens.size());
      ss.prompt_history_len = s->prompt_len;
      ss.output_history_begin = ss.prompt_history_begin + s->prompt_len;
      ss.output_history_len = s->outputs_ahead();
      b.history_tokens.insert(b.history_tokens.end(), s->tokens.begin(), s->tokens.end());
      if (s->ahead_sample >= 0) {  // the history ends with what the launched step draws
        b.history_from_previous.push_back({int32_t(b.history_tokens.size()), s->ahead_sample});
        b.history_tokens.push_back(0);
      }
      b.history_tokens.insert(b.history_tokens.end(), s->draft.begin(), s->draft.begin() + e.num_draft);
    }
    b.seqs.push_back(ss);
  }
  return b;
}

}  // namespace orchid::engine
