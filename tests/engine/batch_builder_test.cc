// The batch builder on its own: page tables kept across steps and written as deltas (a step changes only
// the entries of pages that appeared or left the window), regions that move when a sequence outgrows its
// room, sliding entries cleared behind the window, compaction once dropped regions dominate the tables,
// and per-step fields (tokens, positions, sampled rows, penalty history, banned ids).
#include "engine/batch_builder.h"

#include <gtest/gtest.h>

#include <memory>

namespace orchid::engine {
namespace {

using runtime::kNoPage;

std::unique_ptr<Sequence> make_seq(int64_t id, int32_t len, int32_t pages, int32_t first_page) {
  StopConfig stop;
  stop.max_tokens = 100;
  auto s = std::make_unique<Sequence>(id, StopChecker(stop, nullptr));
  s->prompt_len = len;
  for (int32_t t = 0; t < len; ++t) s->tokens.push_back(int32_t(id * 1000 + t));
  for (int32_t p = 0; p < pages; ++p) {
    s->pages.full.push_back(first_page + p);
    s->pages.sliding.push_back(500 + first_page + p);
  }
  return s;
}

// The table entries of s's region equal its pages (sliding: kNoPage before sliding_begin).
void expect_tables(const runtime::StepBatch& b, const Sequence& s) {
  const int32_t at = s.region.begin;
  for (size_t p = 0; p < s.pages.full.size(); ++p)
    EXPECT_EQ(b.full_page_table[size_t(at) + p], s.pages.full[p]) << "seq " << s.id << " page " << p;
  if (b.sliding_page_table.empty()) return;  // a model without sliding layers
  for (size_t p = 0; p < s.pages.sliding.size(); ++p) {
    const int32_t want = int32_t(p) < s.pages.sliding_begin ? kNoPage : s.pages.sliding[p];
    EXPECT_EQ(b.sliding_page_table[size_t(at) + p], want) << "seq " << s.id << " sliding page " << p;
  }
}

TEST(BatchBuilder, TablesPersistAndChangeByDeltas) {
  BatchBuilder bb(true, runtime::LogitsMode::kNone);
  auto a = make_seq(1, 9, 3, 10), b = make_seq(2, 5, 2, 20);
  std::vector<Sequence*> holders = {a.get(), b.get()};
  std::vector<ScheduledSeq> plan = {{a.get(), 9, true}, {b.get(), 5, true}};
  const runtime::StepBatch& s1 = bb.build(plan, holders);
  ASSERT_EQ(s1.seqs.size(), 2u);
  EXPECT_EQ(s1.seqs[0].full_table_begin, a->region.begin);
  EXPECT_EQ(s1.seqs[1].full_table_begin, b->region.begin);
  EXPECT_NE(a->region.begin, b->region.begin);
  expect_tables(s1, *a);
  expect_tables(s1, *b);
  EXPECT_EQ(s1.tokens.size(), 14u);
  EXPECT_EQ(s1.tokens[9], 2000);  // b's tokens follow a's
  const size_t table_size = s1.full_page_table.size();
  const int32_t a_at = a->region.begin;

  // Next step: a decodes into a new page, and its first sliding page left the window; b decodes in place.
  a->num_computed = 9;
  a->tokens.push_back(7);
  a->pages.full.push_back(13);
  a->pages.sliding.push_back(513);
  a->pages.sliding_begin = 1;
  b->num_computed = 5;
  b->tokens.push_back(8);
  plan = {{a.get(), 1, true}, {b.get(), 1, true}};
  const std::vector<int32_t> before = bb.batch().full_page_table;
  const runtime::StepBatch& s2 = bb.build(plan, holders);
  EXPECT_EQ(s2.full_page_table.size(), table_size);  // no rebuild, no growth
  EXPECT_EQ(a->region.begin, a_at);                  // nothing moved
  size_t changed = 0;
  for (size_t i = 0; i < before.size(); ++i) changed += before[i] != s2.full_page_table[i];
  EXPECT_EQ(changed, 1u);  // exactly a's new page
  expect_tables(s2, *a);
  expect_tables(s2, *b);
  EXPECT_EQ(s2.seqs[0].start_pos, 9);
  EXPECT_EQ(s2.seqs[0].num_full_pages, 4);
  EXPECT_EQ(s2.tokens, (std::vector<int32_t>{7, 8}));
}

TEST(BatchBuilder, OutgrownRegionsMoveAndCompactionReclaims) {
  BatchBuilder bb(false, runtime::LogitsMode::kNone);
  std::vector<std::unique_ptr<Sequence>> seqs;
  std::vector<Sequence*> holders;
  for (int i = 0; i < 300; ++i) {
    seqs.push_back(make_seq(i + 1, 4, 1, i));
    holders.push_back(seqs.back().get());
  }
  std::vector<ScheduledSeq> plan;
  for (auto* s : holders) plan.push_back({s, 4, true});
  bb.build(plan, holders);
  // One sequence outgrows its room (1 page + 16 spare): it moves to a fresh region at the end.
  Sequence* big = holders[0];
  const int32_t old_at = big->region.begin;
  for (int p = 0; p < 40; ++p) big->pages.full.push_back(1000 + p);
  bb.build({{big, 1, true}}, holders);
  EXPECT_NE(big->region.begin, old_at);
  expect_tables(bb.batch(), *big);
  // Drop most sequences: once the dropped entries are over half of the tables (and many), the next build
  // compacts: the survivors get new regions and the tables shrink.
  const size_t before = bb.batch().full_page_table.size();
  std::vector<Sequence*> alive;
  for (size_t i = 0; i < holders.size(); ++i) {
    if (i % 10 == 0) {
      alive.push_back(holders[i]);
    } else {
      bb.drop(holders[i]);
      holders[i]->pages.full.clear();
    }
  }
  plan.clear();
  for (auto* s : alive) plan.push_back({s, 1, true});
  bb.build(plan, alive);
  EXPECT_LT(bb.batch().full_page_table.size(), before / 2);
  for (auto* s : alive) expect_tables(bb.batch(), *s);
}

TEST(BatchBuilder, PenaltyHistoryAndBannedIds) {
  BatchBuilder bb(false, runtime::LogitsMode::kSampled);
  StopConfig stop;
  stop.max_tokens = 10;
  stop.min_tokens = 3;
  stop.stop_ids = {5, 9};
  auto s = std::make_unique<Sequence>(1, StopChecker(stop, nullptr));
  s->prompt_len = 3;
  s->tokens = {11, 12, 13, 21};  // one output so far
  s->num_computed = 3;
  s->params.frequency_penalty = 0.5f;
  s->pages.full = {4};
  const runtime::StepBatch& b = bb.build({{s.get(), 1, true}}, {s.get()});
  ASSERT_EQ(b.seqs.size(), 1u);
  const auto& q = b.seqs[0];
  EXPECT_EQ(b.logits, runtime::LogitsMode::kSampled);
  EXPECT_EQ(q.sample_index, 1);
  EXPECT_EQ(q.prompt_history_len, 3);
  EXPECT_EQ(q.output_history_len, 1);
  EXPECT_EQ(std::vector<int32_t>(b.history_tokens.begin() + q.prompt_history_begin,
                                 b.history_tokens.begin() + q.output_history_begin + q.output_history_len),
            s->tokens);
  // min_tokens not reached: the stop ids may not be drawn.
  ASSERT_EQ(q.num_banned, 2);
  EXPECT_EQ(b.banned_tokens[size_t(q.banned_begin)], 5);
  EXPECT_EQ(b.banned_tokens[size_t(q.banned_begin) + 1], 9);
  ASSERT_EQ(b.params.size(), 1u);
  EXPECT_EQ(b.params[0].frequency_penalty, 0.5f);
}

}  // namespace
}  // namespace orchid::engine
