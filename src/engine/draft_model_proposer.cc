#include "engine/draft_model_proposer.h"

#include <algorithm>

#include "core/error.h"

namespace orchid::engine {

DraftModelProposer::DraftModelProposer(std::shared_ptr<runtime::Backend> draft, int32_t max_positions)
    : backend_(std::move(draft)),
      spec_(backend_->kv_spec()),
      max_positions_(std::min<int32_t>(
          max_positions, int32_t(std::min<int64_t>(backend_->model_config().max_position_embeddings,
                                                   int64_t(spec_.num_full_pages) * spec_.page_size)))),
      blocks_(spec_, /*prefix_caching=*/false) {}

void DraftModelProposer::forget(int64_t seq_id) {
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end()) return;
  blocks_.release(it->second.pages);
  seqs_.erase(it);
}

bool DraftModelProposer::reserve(Tracked& t, int32_t start, int32_t end) {
  if (end > max_positions_) return false;
  const PageNeed need = blocks_.need(t.pages, start, end);
  if (!blocks_.can_allocate(need)) return false;
  blocks_.allocate(t.pages, start, end);
  return true;
}

void DraftModelProposer::propose(std::span<const DraftRequest> requests) {
  std::vector<Work> work;
  for (const DraftRequest& r : requests) {
    if (r.tokens.empty() || r.max_tokens < 1) continue;
    Tracked& t = seqs_[r.seq_id];
    // Keep the K/V of the longest prefix fed before that the sequence still has (accepted drafts
    // included), less at least one token: the first draw needs the logits after the last one.
    const size_t common = size_t(
        std::mismatch(t.fed.begin(), t.fed.end(), r.tokens.begin(), r.tokens.end()).first - t.fed.begin());
    const size_t keep = std::min(common, r.tokens.size() - 1);
    if (keep < t.fed.size()) {
      blocks_.truncate(t.pages, int32_t(keep));
      t.fed.resize(keep);
    }
    // The window moves only with tokens that stay: fed drafts may still be taken back.
    blocks_.release_out_of_window(t.pages, int32_t(keep));
    work.push_back({&r, &t, std::vector<int32_t>(r.tokens.begin() + std::ptrdiff_t(keep), r.tokens.end())});
  }
  while (!work.empty()) {
    feed_and_draw(work);
    std::erase_if(work, [](const Work& w) {
      return w.pending.empty() || int32_t(w.request->draft->size()) >= w.request->max_tokens;
    });
    for (Work& w : work) w.pending.assign(1, w.request->draft->back());
  }
}

void DraftModelProposer::feed_and_draw(std::vector<Work>& work) {
  std::vector<size_t> fed(work.size(), 0);  // of each item's pending tokens
  std::vector<bool> dropped(work.size(), false);
  const int64_t step_tokens = backend_->max_step_tokens();
  const size_t step_seqs = size_t(std::max(1, backend_->max_step_seqs()));
  runtime::StepBatch b;
  std::vector<std::pair<size_t, int32_t>> planned;  // item, tokens this forward
  while (true) {
    b = {};
    planned.clear();
    int64_t budget = step_tokens;
    for (size_t i = 0; i < work.size() && budget > 0 && b.seqs.size() < step_seqs; ++i) {
      Work& w = work[i];
      if (dropped[i] || fed[i] == w.pending.size()) continue;
      const int32_t n = int32_t(std::min<int64_t>(int64_t(w.pending.size() - fed[i]), budget));
      const int32_t start = int32_t(w.seq->fed.size());
      if (!reserve(*w.seq, start, start + n)) {
        dropped[i] = true;
        continue;
      }
      const DraftRequest& r = *w.request;
      runtime::StepSequence s;
      s.seq_id = r.seq_id;
      s.token_begin = b.num_tokens();
      s.num_tokens = n;
      s.start_pos = start;
      s.full_table_begin = int32_t(b.full_page_table.size());
      s.num_full_pages = int32_t(w.seq->pages.full.size());
      b.full_page_table.insert(b.full_page_table.end(), w.seq->pages.full.begin(), w.seq->pages.full.end());
      s.sliding_table_begin = int32_t(b.sliding_page_table.size());
      s.num_sliding_pages = int32_t(w.seq->pages.sliding.size());
      b.sliding_page_table.insert(b.sliding_page_table.end(), w.seq->pages.sliding.begin(),
                                  w.seq->pages.sliding.end());
      b.tokens.insert(b.tokens.end(), w.pending.begin() + std::ptrdiff_t(fed[i]),
                      w.pending.begin() + std::ptrdiff_t(fed[i]) + n);
      s.sample = fed[i] + size_t(n) == w.pending.size();
      if (s.sample) {
        // The draw the target makes at this output index: same parameters, same seed, same counter.
        const int32_t outputs = int32_t(r.tokens.size()) - r.prompt_len + int32_t(r.draft->size());
        s.sample_index = outputs;
        s.params_index = int32_t(b.params.size());
        runtime::SamplingParams p = *r.params;
        p.num_logprobs = -1;
        b.params.push_back(p);
        if (p.uses_penalties()) {
          s.prompt_history_begin = int32_t(b.history_tokens.size());
          s.prompt_history_len = r.prompt_len;
          s.output_history_begin = s.prompt_history_begin + r.prompt_len;
          s.output_history_len = outputs;
          b.history_tokens.insert(b.history_tokens.end(), r.tokens.begin(), r.tokens.end());
          b.history_tokens.insert(b.history_tokens.end(), r.draft->begin(), r.draft->end());
        }
      } else {
        s.params_index = int32_t(b.params.size());
        b.params.emplace_back();
      }
      b.seqs.push_back(s);
      planned.emplace_back(i, n);
      budget -= n;
    }
    if (planned.empty()) break;
    const runtime::StepOutput out = backend_->forward(b);
    ++num_forwards_;
    size_t next_sample = 0;
    for (size_t k = 0; k < planned.size(); ++k) {
      const auto [i, n] = planned[k];
      Work& w = work[i];
      w.seq->fed.insert(w.seq->fed.end(), w.pending.begin() + std::ptrdiff_t(fed[i]),
                        w.pending.begin() + std::ptrdiff_t(fed[i]) + n);
      fed[i] += size_t(n);
      if (!b.seqs[k].sample) continue;
      ORCHID_CHECK(next_sample < out.samples.size(), "draft backend returned too few samples");
      w.request->draft->push_back(out.samples[next_sample++].token);
    }
  }
  // What could not be held gets no more drafts this step and starts afresh next time.
  for (size_t i = 0; i < work.size(); ++i) {
    if (!dropped[i]) continue;
    const int64_t id = work[i].request->seq_id;
    work[i].pending.clear();
    forget(id);
  }
}

}  // namespace orchid::engine
