// The scheduler on its own (no engine, no backend): what one step holds under the token budget and the
// sequence cap, decodes before prefill chunks before new requests, chunked prefill, precedence (priority,
// then arrival), preemption of the lowest-precedence sequence when pages run out and its recomputation, and
// finishing. Every step's batch is checked against the plan (tokens, positions, sampled rows, page tables)
// and the scheduler's invariants. Plans made ahead of a launched step (asynchronous scheduling): positions,
// sample indices and the launched step's draws in the batch, what is left out, and when no plan is made.
#include "engine/scheduler.h"

#include <gtest/gtest.h>

#include <numeric>

#include "core/error.h"

namespace orchid::engine {
namespace {

// A stop rule of max_tokens alone.
StopConfig stop_after(int max_tokens) {
  StopConfig c;
  c.max_tokens = max_tokens;
  return c;
}

runtime::KvCacheSpec spec(int32_t full_pages, int32_t sliding_pages = 64) {
  runtime::KvCacheSpec s;
  s.page_size = 4;
  s.num_full_pages = full_pages;
  s.num_sliding_pages = sliding_pages;
  s.sliding_window = 8;
  return s;
}

struct Fixture {
  BlockManager blocks;
  Scheduler sched;
  std::vector<ScheduledSeq> plan;
  int64_t next_id = 1;

  Fixture(SchedulerConfig c, runtime::KvCacheSpec kv) : blocks(kv, false), sched(c, &blocks) {}

  Sequence* add(int32_t prompt_len, int32_t priority = 0) {
    StopConfig stop;
    stop.max_tokens = 1000;
    auto s = std::make_unique<Sequence>(next_id, StopChecker(stop, nullptr));
    s->arrival = uint64_t(next_id);
    s->priority = priority;
    s->prompt_len = prompt_len;
    s->tokens.resize(size_t(prompt_len));
    std::iota(s->tokens.begin(), s->tokens.end(), int32_t(100 * next_id));
    ++next_id;
    Sequence* raw = s.get();
    sched.add(std::move(s));
    return raw;
  }

  // One step: plan, check the batch against it, mark it computed; sampled sequences get one more token.
  bool step() {
    if (!sched.schedule(plan)) return false;
    const runtime::StepBatch& b = sched.batch();
    EXPECT_EQ(b.seqs.size(), plan.size());
    int32_t tokens = 0;
    for (size_t i = 0; i < plan.size(); ++i) {
      const auto& e = plan[i];
      const auto& s = b.seqs[i];
      EXPECT_EQ(s.seq_id, e.seq->id);
      EXPECT_EQ(s.num_tokens, e.num_tokens);
      EXPECT_EQ(s.start_pos, e.seq->num_computed);
      EXPECT_EQ(s.sample, e.sample);
      EXPECT_EQ(s.token_begin, tokens);
      for (int32_t t = 0; t < e.num_tokens; ++t)
        EXPECT_EQ(b.tokens[size_t(tokens + t)], e.seq->tokens[size_t(e.seq->num_computed + t)]);
      const int32_t pages = (s.start_pos + s.num_tokens + 3) / 4;
      EXPECT_EQ(s.num_full_pages, pages);
      for (int32_t p = 0; p < pages; ++p)
        EXPECT_EQ(b.full_page_table[size_t(s.full_table_begin + p)], e.seq->pages.full[size_t(p)]);
      tokens += e.num_tokens;
    }
    EXPECT_EQ(int32_t(b.tokens.size()), tokens);
    for (const auto& e : plan) {
      sched.complete(e);
      if (e.sample) e.seq->tokens.push_back(7);
    }
    sched.check_invariants();
    return true;
  }
};

TEST(Scheduler, BudgetChunksAndOrder) {
  SchedulerConfig c;
  c.max_num_batched_tokens = 10;
  Fixture f(c, spec(64));
  Sequence* a = f.add(25);
  Sequence* b = f.add(3);
  // Step 1: a's first chunk takes the whole budget; b waits.
  ASSERT_TRUE(f.step());
  ASSERT_EQ(f.plan.size(), 1u);
  EXPECT_EQ(f.plan[0].seq, a);
  EXPECT_EQ(f.plan[0].num_tokens, 10);
  EXPECT_FALSE(f.plan[0].sample);
  // Step 2: a's next chunk (running prefill before waiting requests), again the whole budget.
  ASSERT_TRUE(f.step());
  EXPECT_EQ(f.plan[0].seq, a);
  EXPECT_EQ(f.plan[0].num_tokens, 10);
  // Step 3: a's last 5 tokens (sampled), then b's 3-token prompt in the 5 left.
  ASSERT_TRUE(f.step());
  ASSERT_EQ(f.plan.size(), 2u);
  EXPECT_EQ(f.plan[0].seq, a);
  EXPECT_EQ(f.plan[0].num_tokens, 5);
  EXPECT_TRUE(f.plan[0].sample);
  EXPECT_EQ(f.plan[1].seq, b);
  EXPECT_TRUE(f.plan[1].sample);
  // Step 4: both decode, one token each, in precedence order.
  ASSERT_TRUE(f.step());
  ASSERT_EQ(f.plan.size(), 2u);
  EXPECT_EQ(f.plan[0].seq, a);
  EXPECT_EQ(f.plan[0].num_tokens, 1);
  EXPECT_EQ(f.plan[1].seq, b);
  EXPECT_EQ(f.plan[1].num_tokens, 1);
}

TEST(Scheduler, SequenceCapAndPriority) {
  SchedulerConfig c;
  c.max_num_seqs = 2;
  Fixture f(c, spec(64));
  Sequence* low = f.add(4, 5);
  Sequence* first = f.add(4, 0);
  Sequence* second = f.add(4, 0);
  ASSERT_TRUE(f.step());
  ASSERT_EQ(f.plan.size(), 2u);  // the cap: the lower-precedence request waits
  EXPECT_EQ(f.plan[0].seq, first);
  EXPECT_EQ(f.plan[1].seq, second);
  EXPECT_EQ(low->state, SeqState::kWaiting);
  f.sched.finish(first);
  ASSERT_TRUE(f.step());  // a slot is free: second decodes, low is admitted
  ASSERT_EQ(f.plan.size(), 2u);
  EXPECT_EQ(f.plan[0].seq, second);
  EXPECT_EQ(f.plan[1].seq, low);
  EXPECT_EQ(f.sched.num_running(), 2u);
}

TEST(Scheduler, PreemptsTheLowestPrecedenceAndRecomputesIt) {
  SchedulerConfig c;
  c.max_num_batched_tokens = 64;
  Fixture f(c, spec(6));    // 6 pages of 4 tokens
  Sequence* a = f.add(11);  // 3 pages
  Sequence* b = f.add(11);  // 3 pages: the pool is full after both prefills
  ASSERT_TRUE(f.step());
  EXPECT_EQ(f.plan.size(), 2u);
  // a needs a 4th page at position 12 (tokens 11 + 1 = 12 -> page 3 at the 13th token).
  ASSERT_TRUE(f.step());  // positions 11 -> both still fit in 3 pages
  int preempted_at = -1;
  for (int i = 0; i < 6 && preempted_at < 0; ++i) {
    ASSERT_TRUE(f.step());
    if (b->state == SeqState::kPreempted || b->state == SeqState::kWaiting) preempted_at = i;
  }
  ASSERT_GE(preempted_at, 0) << "b (lower precedence) was never preempted";
  EXPECT_EQ(f.sched.counters().preemptions, 1);
  EXPECT_EQ(b->num_preemptions, 1);
  EXPECT_EQ(b->num_computed, 0);
  EXPECT_FALSE(b->pages.holds_pages());
  EXPECT_EQ(a->state, SeqState::kRunning);
  // a finishes; b is readmitted and recomputes its whole history (prompt and outputs) in one chunk.
  const int32_t b_len = int32_t(b->tokens.size());
  f.sched.finish(a);
  ASSERT_TRUE(f.step());
  ASSERT_EQ(f.plan.size(), 1u);
  EXPECT_EQ(f.plan[0].seq, b);
  EXPECT_EQ(f.plan[0].num_tokens, b_len);
  EXPECT_TRUE(f.plan[0].sample);
}

TEST(Scheduler, FinishedSequencesAreReapedAndNothingIsLeft) {
  Fixture f({}, spec(32));
  Sequence* a = f.add(5);
  Sequence* b = f.add(6);
  ASSERT_TRUE(f.step());
  f.sched.finish(a);
  EXPECT_EQ(f.sched.find(a->id), nullptr);
  ASSERT_TRUE(f.step());  // b decodes alone
  ASSERT_EQ(f.plan.size(), 1u);
  EXPECT_EQ(f.plan[0].seq, b);
  f.sched.finish(b);
  EXPECT_FALSE(f.step());
  EXPECT_EQ(f.sched.num_sequences(), 0u);
  EXPECT_EQ(f.blocks.full_pool().num_free(), 32);
}

TEST(Scheduler, RejectsMisuse) {
  Fixture f({}, spec(8));
  auto s = std::make_unique<Sequence>(1, StopChecker(stop_after(4), nullptr));
  EXPECT_THROW(f.sched.add(std::move(s)), InternalError);  // an empty prompt
  Sequence* a = f.add(3);
  f.sched.finish(a);
  EXPECT_THROW(f.sched.finish(a), InternalError);
}

// ---- Drafts (speculative decoding) ----

// Proposes `max_tokens` copies of 9 for every sequence asked, and records who was asked for how many.
class NinesProposer final : public Proposer {
 public:
  void propose(std::span<const DraftRequest> requests) override {
    for (const DraftRequest& r : requests) {
      asked.emplace_back(r.seq_id, r.max_tokens);
      r.draft->assign(size_t(r.max_tokens), 9);
    }
  }
  void forget(int64_t id) override { forgotten.push_back(id); }
  std::vector<std::pair<int64_t, int32_t>> asked;
  std::vector<int64_t> forgotten;
};

// One step in which every drafted sequence has its first accept(seq) drafts accepted.
template <typename Accept>
void step_with_drafts(Fixture& f, Accept accept) {
  ASSERT_TRUE(f.sched.schedule(f.plan));
  const runtime::StepBatch& b = f.sched.batch();
  for (size_t i = 0; i < f.plan.size(); ++i) {
    const ScheduledSeq& e = f.plan[i];
    const runtime::StepSequence& s = b.seqs[i];
    EXPECT_EQ(s.num_draft, e.num_draft);
    EXPECT_EQ(s.num_tokens, e.num_tokens);
    for (int32_t d = 0; d < e.num_draft; ++d)
      EXPECT_EQ(b.tokens[size_t(s.token_begin + s.num_tokens - e.num_draft + d)], 9);
    EXPECT_EQ((s.start_pos + s.num_tokens + 3) / 4, s.num_full_pages);
  }
  for (const ScheduledSeq& e : f.plan) {
    const int32_t a = e.sample ? std::min(e.num_draft, accept(e.seq)) : 0;
    if (e.sample) {
      for (int32_t d = 0; d < a; ++d) e.seq->tokens.push_back(9);
      e.seq->tokens.push_back(7);
    }
    f.sched.complete(e, a);
  }
  f.sched.check_invariants();
}

// As the engine marks a launched step's sequences (Sequence::ahead) and reads the step later.
void mark_launched(const std::vector<ScheduledSeq>& plan) {
  int32_t sample = 0;
  for (const auto& e : plan) {
    e.seq->ahead = e.num_tokens;
    e.seq->ahead_sample = e.sample ? sample++ : -1;
  }
}
void read_launched(Scheduler& sched, const std::vector<ScheduledSeq>& plan, int32_t token) {
  for (const auto& e : plan) {
    e.seq->ahead = 0;
    e.seq->ahead_sample = -1;
    if (e.sample) e.seq->tokens.push_back(token);
    sched.complete(e);
  }
}

TEST(SchedulerAhead, PlansFromWhatTheLaunchedStepAdds) {
  SchedulerConfig c;
  c.max_num_batched_tokens = 8;
  Fixture f(c, spec(64));
  Sequence* a = f.add(6);
  Sequence* b = f.add(20);
  std::vector<ScheduledSeq> launched;
  ASSERT_TRUE(f.sched.schedule(launched));  // a's whole prompt (sampled), b's first 2 tokens
  ASSERT_EQ(launched.size(), 2u);
  mark_launched(launched);
  f.sched.check_invariants();  // pages held for the launched tokens count
  Sequence* late = f.add(3);   // arrives while the step runs
  std::vector<ScheduledSeq> next;
  ASSERT_TRUE(f.sched.schedule(next, /*ahead=*/true));
  const runtime::StepBatch& batch = f.sched.batch();
  ASSERT_EQ(next.size(), 2u);  // a decodes its draw, b's next chunk takes the rest; `late` waits
  EXPECT_EQ(next[0].seq, a);
  EXPECT_EQ(next[1].seq, b);
  EXPECT_EQ(next[1].num_tokens, 7);
  ASSERT_EQ(batch.seqs.size(), 2u);
  EXPECT_EQ(batch.seqs[0].start_pos, 6);
  EXPECT_EQ(batch.seqs[0].sample_index, 1);  // the launched step draws output 0
  EXPECT_TRUE(batch.seqs[0].sample);
  ASSERT_EQ(batch.from_previous.size(), 1u);
  EXPECT_EQ(batch.from_previous[0].token, 0);
  EXPECT_EQ(batch.from_previous[0].sample, 0);
  EXPECT_EQ(batch.seqs[1].start_pos, 2);
  for (int32_t t = 0; t < 7; ++t) EXPECT_EQ(batch.tokens[size_t(1 + t)], b->tokens[size_t(2 + t)]);
  EXPECT_EQ(int32_t(a->pages.full.size()), 2);  // position 6 is in page 1
  read_launched(f.sched, launched, 42);
  mark_launched(next);
  f.sched.check_invariants();
  EXPECT_EQ(a->tokens.back(), 42);
  // The next plan ahead: a's second draw, b's chunk, and now `late` with what budget is left.
  std::vector<ScheduledSeq> third;
  ASSERT_TRUE(f.sched.schedule(third, true));
  ASSERT_EQ(third.size(), 2u);
  EXPECT_EQ(third[0].seq, a);
  EXPECT_EQ(f.sched.batch().seqs[0].start_pos, 7);
  EXPECT_EQ(f.sched.batch().seqs[0].sample_index, 2);
  EXPECT_EQ(third[1].seq, b);  // b's last 11 tokens need more than the 7 left: a chunk, `late` waits
  EXPECT_EQ(f.sched.batch().seqs[1].start_pos, 9);
  EXPECT_EQ(late->state, SeqState::kWaiting);
}

TEST(SchedulerAhead, LeavesOutWhatEndsTakesHistoryFromTheDrawAndStopsForExports) {
  SchedulerConfig c;
  c.max_model_len = 64;
  Fixture f(c, spec(64));
  Sequence* last = f.add(5);  // its launched draw is its last (max_tokens 1)
  last->stop = StopChecker(stop_after(1), nullptr);
  Sequence* goes_on = f.add(5);
  std::vector<ScheduledSeq> launched, next;
  ASSERT_TRUE(f.sched.schedule(launched));
  mark_launched(launched);
  ASSERT_TRUE(f.sched.schedule(next, true));
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].seq, goes_on);
  read_launched(f.sched, launched, 3);
  f.sched.finish(last);  // the engine ends it when it reads its draw
  mark_launched(next);
  // A penalty's history ends with the launched draw, named like the token.
  goes_on->params.frequency_penalty = 0.5f;
  std::vector<ScheduledSeq> penalized;
  ASSERT_TRUE(f.sched.schedule(penalized, true));
  const runtime::StepBatch& b = f.sched.batch();
  ASSERT_EQ(b.seqs.size(), 1u);
  EXPECT_EQ(b.seqs[0].output_history_len, 2);  // output 0 known, output 1 drawn by the launched step
  ASSERT_EQ(b.history_from_previous.size(), 1u);
  EXPECT_EQ(b.history_from_previous[0].token, b.seqs[0].output_history_begin + 1);
  EXPECT_EQ(b.history_from_previous[0].sample, 0);
  EXPECT_EQ(int32_t(b.history_tokens.size()), 5 + 2);
  read_launched(f.sched, next, 4);
  mark_launched(penalized);
  // K/V to export are read when the request ends: no plan ahead while one runs, and nothing changes.
  goes_on->kv_export = true;
  const auto pages = goes_on->pages.full;
  std::vector<ScheduledSeq> none;
  EXPECT_FALSE(f.sched.schedule(none, true));
  EXPECT_TRUE(none.empty());
  EXPECT_EQ(goes_on->pages.full, pages);
  f.sched.check_invariants();
}

TEST(SchedulerAhead, NeverPreempts) {
  SchedulerConfig c;
  Fixture f(c, spec(3, 64));  // 3 pages: two sequences of 4 tokens each fill one; the third is left
  Sequence* a = f.add(4);
  Sequence* b = f.add(4);
  std::vector<ScheduledSeq> launched, next;
  ASSERT_TRUE(f.sched.schedule(launched));
  mark_launched(launched);
  // Each decode needs a new page (position 4): two pages for one free page. Without a step launched the
  // scheduler would preempt b; ahead of one it makes no plan.
  EXPECT_FALSE(f.sched.schedule(next, true));
  EXPECT_EQ(a->state, SeqState::kRunning);
  EXPECT_EQ(b->state, SeqState::kRunning);
  read_launched(f.sched, launched, 5);
  f.sched.check_invariants();
  ASSERT_TRUE(f.sched.schedule(next));
  EXPECT_EQ(f.sched.counters().preemptions, 1);
}

TEST(SchedulerDrafts, DraftsShareTheBudgetLeftAfterOneTokenPerDecode) {
  NinesProposer p;
  SchedulerConfig c;
  c.max_num_batched_tokens = 11;
  c.num_speculative_tokens = 4;
  c.proposer = &p;
  Fixture f(c, spec(64));
  Sequence* a = f.add(5);
  Sequence* b = f.add(6);
  Sequence* d = f.add(3);
  step_with_drafts(f, [](Sequence*) { return 0; });  // the prompts (14 tokens > 11: d waits)
  EXPECT_TRUE(p.asked.empty());
  // Decodes of a and b with drafts of (11 - 2) / 2 = 4 each, and what is left for d's prompt, until d
  // decodes.
  while (d->num_outputs() == 0) step_with_drafts(f, [](Sequence*) { return 0; });
  p.asked.clear();
  const int64_t before = f.sched.counters().spec_draft_tokens;
  step_with_drafts(f, [](Sequence*) { return 0; });
  // Three decodes in a budget of 11: (11 - 3) / 3 = 2 drafts each.
  ASSERT_EQ(p.asked.size(), 3u);
  for (const auto& [id, n] : p.asked) EXPECT_EQ(n, 2) << id;
  EXPECT_EQ(f.sched.counters().spec_draft_tokens - before, 6);
  (void)a;
  (void)b;
}

TEST(SchedulerDrafts, RejectedDraftsGiveTheirPagesBack) {
  NinesProposer p;
  SchedulerConfig c;
  c.num_speculative_tokens = 7;
  c.proposer = &p;
  Fixture f(c, spec(64));
  Sequence* s = f.add(4);  // one full page
  step_with_drafts(f, [](Sequence*) { return 0; });
  const int32_t free_after_prefill = f.blocks.full_pool().num_free();
  // 1 + 7 tokens from position 4: positions 4..11, three pages; none accepted: back to two pages.
  step_with_drafts(f, [](Sequence*) { return 0; });
  EXPECT_EQ(s->num_computed, 5);
  EXPECT_EQ(s->pages.full.size(), 2u);
  EXPECT_EQ(f.blocks.full_pool().num_free(), free_after_prefill - 1);
  // All 7 accepted: 8 tokens computed this step, positions 5..12, four pages kept.
  step_with_drafts(f, [](Sequence*) { return 7; });
  EXPECT_EQ(s->num_computed, 13);
  EXPECT_EQ(s->tokens.size(), 14u);
  EXPECT_EQ(s->pages.full.size(), 4u);
  EXPECT_EQ(f.sched.counters().spec_accepted_tokens, 7);
  // The sliding window keeps shrinking behind the sequence as usual.
  for (int i = 0; i < 4; ++i) step_with_drafts(f, [](Sequence*) { return 2; });
  EXPECT_GT(s->pages.sliding_begin, 0);
  f.sched.finish(s);
  EXPECT_EQ(f.blocks.full_pool().num_free(), 64);
  EXPECT_EQ(f.blocks.sliding_pool().num_free(), 64);
  EXPECT_EQ(p.forgotten, (std::vector<int64_t>{s->id}));
}

TEST(SchedulerDrafts, NoDraftPastMaxTokensTheContextOrABannedStop) {
  NinesProposer p;
  SchedulerConfig c;
  c.num_speculative_tokens = 5;
  c.proposer = &p;
  c.max_model_len = 12;
  Fixture f(c, spec(64));
  Sequence* s = f.add(8);
  step_with_drafts(f, [](Sequence*) { return 0; });  // 9 tokens now
  step_with_drafts(f, [](Sequence*) { return 0; });
  // max_model_len 12, 9 tokens: at most 12 - 9 - 1 = 2 drafts.
  ASSERT_EQ(p.asked.size(), 1u);
  EXPECT_EQ(p.asked[0].second, 2);
  f.sched.finish(s);

  StopConfig few;
  few.max_tokens = 3;
  few.min_tokens = 0;
  auto t = std::make_unique<Sequence>(50, StopChecker(few, nullptr));
  t->prompt_len = 2;
  t->tokens = {1, 2};
  Sequence* tp = t.get();
  f.sched.add(std::move(t));
  p.asked.clear();
  step_with_drafts(f, [](Sequence*) { return 0; });  // the prompt, and output 1
  step_with_drafts(f, [](Sequence*) { return 0; });
  ASSERT_EQ(p.asked.size(), 1u);
  EXPECT_EQ(p.asked[0].second, 1);  // max_tokens 3 with 1 output: one more draw, then the last
  f.sched.finish(tp);

  StopConfig banned;
  banned.stop_ids = {0};
  banned.min_tokens = 4;
  banned.max_tokens = 100;
  auto u = std::make_unique<Sequence>(60, StopChecker(banned, nullptr));
  u->prompt_len = 2;
  u->tokens = {1, 2};
  f.sched.add(std::move(u));
  p.asked.clear();
  for (int i = 0; i < 4; ++i) step_with_drafts(f, [](Sequence*) { return 0; });
  EXPECT_TRUE(p.asked.empty()) << "stop ids are banned until min_tokens";
  step_with_drafts(f, [](Sequence*) { return 0; });
  EXPECT_EQ(p.asked.size(), 1u);
}

}  // namespace
}  // namespace orchid::engine
