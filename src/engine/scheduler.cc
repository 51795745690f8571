#include "engine/scheduler.h"

#include <algorithm>

#include "core/error.h"

namespace orchid::engine {

namespace {
bool before(const Sequence* a, const Sequence* b) {
  return a->precedence() < b->precedence();
}
}  // namespace

Scheduler::Scheduler(SchedulerConfig config, BlockManager* blocks)
    : config_(config), blocks_(blocks), builder_(blocks->has_sliding(), config.logits) {
  ORCHID_CHECK(config_.max_num_seqs > 0 && config_.max_num_batched_tokens > 0 &&
               config_.max_chunk_tokens > 0);
}

void Scheduler::add(std::unique_ptr<Sequence> seq) {
  ORCHID_CHECK(seq->tokens.size() == size_t(seq->prompt_len) && seq->prompt_len > 0);
  Sequence* s = seq.get();
  ORCHID_CHECK(seqs_.emplace(s->id, std::move(seq)).second, "sequence {} added twice", s->id);
  s->state = SeqState::kWaiting;
  insert_waiting(s);
}

Sequence* Scheduler::find(int64_t id) const {
  auto it = seqs_.find(id);
  return it == seqs_.end() || it->second->state == SeqState::kFinished ? nullptr : it->second.get();
}

std::vector<Sequence*> Scheduler::sequences() const {
  std::vector<Sequence*> out;
  for (const auto& [id, s] : seqs_)
    if (s->state != SeqState::kFinished) out.push_back(s.get());
  return out;
}

void Scheduler::insert_waiting(Sequence* s) {
  waiting_.insert(std::upper_bound(waiting_.begin(), waiting_.end(), s, before), s);
}

void Scheduler::insert_running(Sequence* s) {
  running_.insert(std::upper_bound(running_.begin(), running_.end(), s, before), s);
}

void Scheduler::finish(Sequence* s) {
  ORCHID_CHECK(s->state != SeqState::kFinished, "sequence {} finished twice", s->id);
  blocks_->release(s->pages);
  builder_.drop(s);
  s->draft.clear();
  if (config_.proposer) config_.proposer->forget(s->id);
  s->state = SeqState::kFinished;  // dropped from the queues at the next schedule()
  ++finished_unreaped_;
}

void Scheduler::preempt(Sequence* s, std::vector<ScheduledSeq>& plan, int32_t& budget) {
  if (s->plan_slot >= 0) {  // scheduled earlier in this step: give its tokens back
    budget += plan[size_t(s->plan_slot)].num_tokens;
    plan[size_t(s->plan_slot)].seq = nullptr;
    s->plan_slot = -1;
  }
  blocks_->release(s->pages);
  builder_.drop(s);
  s->num_computed = 0;
  s->state = SeqState::kPreempted;
  ++s->num_preemptions;
  ++counters_.preemptions;
  running_.erase(std::find(running_.begin(), running_.end(), s));
  insert_waiting(s);
  preempted_this_step_ = true;
  s->draft.clear();
  if (config_.proposer) config_.proposer->forget(s->id);
}

bool Scheduler::reserve(Sequence* s, int32_t n, int32_t num_draft, std::vector<ScheduledSeq>& plan,
                        int32_t& budget, bool ahead) {
  const int32_t start = s->computed_ahead();
  blocks_->release_out_of_window(s->pages, start);
  const int32_t end = start + n;
  while (!blocks_->can_allocate(blocks_->need(s->pages, start, end))) {
    if (ahead) return false;             // no preemption while a step is launched: it runs at the next plan
    Sequence* victim = running_.back();  // lowest precedence
    preempt(victim, plan, budget);
    if (victim == s) return false;
  }
  blocks_->allocate(s->pages, start, end);
  s->plan_slot = int32_t(plan.size());
  plan.push_back({s, n, end - num_draft == s->length_ahead(), num_draft});
  budget -= n;
  return true;
}

void Scheduler::propose_drafts(const std::vector<Sequence*>& decodes, int32_t budget) {
  if (!config_.proposer || config_.num_speculative_tokens <= 0 || decodes.empty()) return;
  // One token for every decode first; drafts share what is left evenly.
  const int32_t spare = (budget - int32_t(decodes.size())) / int32_t(decodes.size());
  const int32_t k = std::min(config_.num_speculative_tokens, spare);
  if (k <= 0) return;
  std::vector<DraftRequest> requests;
  for (Sequence* s : decodes) {
    // Not where the drawing rule changes inside the run: a structured-output mask follows each token, and
    // stop ids are banned until min_tokens. Nor past max_tokens, the context, or one chunk's sliding pages.
    if (s->constraint || s->stop.bans_stop_ids(s->num_outputs())) continue;
    const int32_t len = int32_t(s->tokens.size());
    const int32_t most = std::min({k, s->stop.config().max_tokens - s->num_outputs() - 1,
                                   config_.max_model_len - len - 1, config_.max_chunk_tokens - 1});
    if (most > 0) requests.push_back({s->id, s->tokens, s->prompt_len, most, &s->params, &s->draft});
  }
  if (requests.empty()) return;
  config_.proposer->propose(requests);
  for (const DraftRequest& r : requests)
    ORCHID_CHECK(int32_t(r.draft->size()) <= r.max_tokens, "proposer gave {} drafts for at most {}",
                 r.draft->size(), r.max_tokens);
}

bool Scheduler::ends_at_launched_step(const Sequence* s) const {
  // Its draw there is its last for a reason known now: max_tokens, or the context full.
  return s->ahead_sample >= 0 &&
         (s->outputs_ahead() >= s->stop.config().max_tokens || s->length_ahead() >= config_.max_model_len);
}

bool Scheduler::plannable_ahead() const {
  if (config_.proposer || config_.logits != runtime::LogitsMode::kNone) return false;
  PageNeed decodes;
  for (const Sequence* s : running_) {
    if (s->state != SeqState::kRunning || ends_at_launched_step(s)) continue;
    // A structured output's mask follows the token the launched step draws, which the host computes;
    // exported K/V are read when the request ends.
    if ((s->constraint && !config_.late_masks) || s->kv_export) return false;
    if (s->remaining_ahead() == 1) {
      const PageNeed n = blocks_->need(s->pages, s->computed_ahead(), s->computed_ahead() + 1);
      decodes.full += n.full;
      decodes.sliding += n.sliding;
    }
  }
  // Every decode goes on (as schedule() would make room for them by preempting).
  if (!blocks_->can_allocate(decodes)) return false;
  // The head of the queue must be one this plan may admit, or one that waits either way.
  if (!waiting_.empty() && running_.size() < size_t(config_.max_num_seqs)) {
    const Sequence* head = waiting_.front();
    if (head->state != SeqState::kFinished && ((head->constraint && !config_.late_masks) || head->kv_export))
      return false;
  }
  return true;
}

bool Scheduler::schedule(std::vector<ScheduledSeq>& plan, bool ahead) {
  plan.clear();
  if (finished_unreaped_ > 0) {
    auto done = [](const Sequence* s) { return s->state == SeqState::kFinished; };
    std::erase_if(running_, done);
    std::erase_if(waiting_, done);
    if (!ahead) {  // a launched step's plan may still name finished sequences: they stay until it is read
      std::erase_if(seqs_, [](const auto& kv) { return kv.second->state == SeqState::kFinished; });
      finished_unreaped_ = 0;
    }
  }
  if (ahead && !plannable_ahead()) return false;

  preempted_this_step_ = false;
  int32_t budget = config_.max_num_batched_tokens;

  // 1. Decodes of running sequences, in precedence order, with their drafts.
  decodes_.clear();
  for (Sequence* s : running_) {
    s->draft.clear();
    if (s->remaining_ahead() == 1 && !ends_at_launched_step(s)) decodes_.push_back(s);
  }
  propose_drafts(decodes_, budget);
  for (Sequence* s : decodes_) {
    if (budget <= 0) break;
    if (s->state != SeqState::kRunning) continue;  // preempted by an earlier one's reservation
    const int32_t num_draft = std::min(int32_t(s->draft.size()), budget - 1);
    reserve(s, 1 + num_draft, num_draft, plan, budget, ahead);
  }
  // 2. The next prefill chunk of running sequences (long prompts, resumed sequences).
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    Sequence* s = running_[i];
    if (s->plan_slot >= 0 || s->remaining_ahead() <= 0 || ends_at_launched_step(s)) continue;
    reserve(s, std::min({s->remaining_ahead(), budget, config_.max_chunk_tokens}), 0, plan, budget, ahead);
  }
  // 3. Waiting requests, head of the queue first; none while running ones had to give way this step.
  while (!preempted_this_step_ && !waiting_.empty() && budget > 0 &&
         running_.size() < size_t(config_.max_num_seqs)) {
    Sequence* s = waiting_.front();
    if (ahead && ((s->constraint && !config_.late_masks) || s->kv_export))
      break;  // admitted by a plan made with no step launched
    const int32_t len = int32_t(s->tokens.size());
    // K/V handed over, or else the prefix cache; at least the last token is computed, to have logits.
    const bool importing = s->kv_import != nullptr;
    const int32_t hit = importing ? s->import_len : blocks_->find_cached_prefix(s->pages, s->tokens, len - 1);
    const int32_t n = std::min({len - hit, budget, config_.max_chunk_tokens});
    if (!blocks_->can_allocate(importing ? blocks_->need_fresh(hit, hit + n)
                                         : blocks_->need(s->pages, hit, hit + n)))
      break;
    if (importing)
      blocks_->allocate_fresh(s->pages, hit, hit + n);
    else
      blocks_->allocate(s->pages, hit, hit + n);
    s->num_computed = hit;
    if (importing) {
      s->imported_tokens = hit;
      counters_.imported_tokens += hit;
    } else if (!s->admitted_once) {
      s->cached_tokens = hit;
      counters_.prefix_query_tokens += s->prompt_len;
      counters_.prefix_hit_tokens += hit;
    }
    const bool first = !s->admitted_once;
    s->admitted_once = true;
    waiting_.pop_front();
    s->state = SeqState::kRunning;
    insert_running(s);
    s->plan_slot = int32_t(plan.size());
    plan.push_back({s, n, hit + n == len, 0, importing, first});
    budget -= n;
  }

  std::erase_if(plan, [](const ScheduledSeq& e) { return e.seq == nullptr; });
  for (size_t i = 0; i < plan.size(); ++i) plan[i].seq->plan_slot = -1;
  builder_.build(plan, running_);
  return !plan.empty();
}

void Scheduler::complete(const ScheduledSeq& e, int32_t accepted) {
  Sequence* s = e.seq;
  ORCHID_CHECK(accepted >= 0 && accepted <= e.num_draft, "{} of {} drafts accepted", accepted, e.num_draft);
  s->num_computed += e.num_tokens - e.num_draft + accepted;
  ORCHID_CHECK(s->num_computed <= int32_t(s->tokens.size()));
  if (accepted < e.num_draft) {
    blocks_->truncate(s->pages, s->num_computed);
    builder_.truncated(s);
  }
  blocks_->commit(s->pages, s->tokens, s->num_computed);
  if (e.num_draft > 0) {
    ++counters_.spec_drafts;
    counters_.spec_draft_tokens += e.num_draft;
    counters_.spec_accepted_tokens += accepted;
  }
  s->draft.clear();
}

void Scheduler::check_invariants() const {
  std::vector<const SeqPages*> held;
  size_t live = 0;
  for (const auto& [id, s] : seqs_) {
    if (s->state == SeqState::kFinished) {
      ORCHID_CHECK(!s->pages.holds_pages(), "finished sequence {} holds pages", id);
      continue;
    }
    ++live;
    ORCHID_CHECK(s->num_computed < int32_t(s->tokens.size()), "sequence {}: nothing left to compute", id);
  }
  auto unfinished = [](const auto& list) {
    return size_t(
        std::count_if(list.begin(), list.end(), [](auto* s) { return s->state != SeqState::kFinished; }));
  };
  ORCHID_CHECK(live == unfinished(running_) + unfinished(waiting_), "a sequence is lost or queued twice");
  ORCHID_CHECK(running_.size() <= size_t(config_.max_num_seqs));
  ORCHID_CHECK(std::is_sorted(running_.begin(), running_.end(), before));
  ORCHID_CHECK(std::is_sorted(waiting_.begin(), waiting_.end(), before));
  const int32_t p = blocks_->page_size();
  for (const Sequence* s : running_) {
    if (s->state == SeqState::kFinished) continue;
    ORCHID_CHECK(s->state == SeqState::kRunning, "sequence {} in the running list", s->id);
    ORCHID_CHECK(int32_t(s->pages.full.size()) == (s->computed_ahead() + p - 1) / p,
                 "sequence {}: {} pages for {} computed tokens and {} in flight", s->id, s->pages.full.size(),
                 s->num_computed, s->ahead);
    held.push_back(&s->pages);
  }
  for (const Sequence* s : waiting_) {
    if (s->state == SeqState::kFinished) continue;
    ORCHID_CHECK(s->state == SeqState::kWaiting || s->state == SeqState::kPreempted);
    ORCHID_CHECK(!s->pages.holds_pages() && s->num_computed == 0, "waiting sequence {} holds pages", s->id);
  }
  blocks_->check_invariants(held);
}

}  // namespace orchid::engine
