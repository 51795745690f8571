#include "engine/block_manager.h"

#include <gtest/gtest.h>

#include <random>

#include "core/error.h"

namespace orchid::engine {
namespace {

using runtime::kNoPage;

runtime::KvCacheSpec spec(int32_t full, int32_t sliding, int32_t window = 8, int32_t page = 4) {
  return {.page_size = page, .num_full_pages = full, .num_sliding_pages = sliding, .sliding_window = window};
}

std::vector<int32_t> iota_tokens(int32_t n, int32_t offset = 0) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) t[size_t(i)] = offset + i;
  return t;
}

// Runs a sequence from `start` to the end of `tokens` in chunks, as the scheduler would.
void run(BlockManager& bm, SeqPages& s, const std::vector<int32_t>& tokens, int32_t start, int32_t chunk) {
  for (int32_t pos = start; pos < int32_t(tokens.size());) {
    const int32_t end = std::min<int32_t>(pos + chunk, int32_t(tokens.size()));
    bm.release_out_of_window(s, pos);
    ASSERT_TRUE(bm.can_allocate(bm.need(s, pos, end)));
    bm.allocate(s, pos, end);
    bm.commit(s, tokens, end);
    pos = end;
  }
}

TEST(BlockManager, SlidingPagesFollowTheWindow) {
  BlockManager bm(spec(64, 16), true);
  SeqPages s;
  const auto tokens = iota_tokens(60);
  run(bm, s, tokens, 0, 1);  // decode-like, one token at a time
  // 60 tokens: 15 full pages; sliding keeps the pages of positions >= 59 - 8 + 1 = 52 -> pages 13, 14.
  EXPECT_EQ(s.full.size(), 15u);
  ASSERT_EQ(s.sliding.size(), 15u);
  for (int k = 0; k < 15; ++k) EXPECT_EQ(s.sliding[size_t(k)] == kNoPage, k < bm.first_window_page(59)) << k;
  EXPECT_LE(bm.sliding_pool().num_used(), (8 + 3) / 4 + 1);
  const SeqPages* live[] = {&s};
  bm.check_invariants(live);
  bm.release(s);
  bm.check_invariants({});
  EXPECT_EQ(bm.full_pool().num_used(), 0);
  EXPECT_EQ(bm.sliding_pool().num_used(), 0);
}

TEST(BlockManager, DecodeNeedsAtMostCeilWindowOverPagePlusOneSlidingPages) {
  for (int32_t window : {5, 8, 9, 16}) {
    BlockManager bm(spec(128, 64, window), false);
    SeqPages s;
    const auto tokens = iota_tokens(100);
    for (int32_t pos = 0; pos < 100; ++pos) {
      bm.release_out_of_window(s, pos);
      bm.allocate(s, pos, pos + 1);
      EXPECT_LE(bm.sliding_pool().num_used(), (window + 3) / 4 + 1) << "window " << window << " pos " << pos;
    }
    bm.release(s);
  }
}

TEST(BlockManager, SharesCachedFullPagesOfACommonPrefix) {
  BlockManager bm(spec(64, 32), true);
  SeqPages a, b;
  auto ta = iota_tokens(14);  // 3 full pages + 2 tokens
  run(bm, a, ta, 0, 5);
  auto tb = ta;
  tb.resize(11);
  tb.push_back(99);  // differs in page 2
  tb.push_back(100);
  // At most len-1 tokens may come from the cache; page 2 differs, so 2 pages.
  const int32_t hit = bm.find_cached_prefix(b, tb, int32_t(tb.size()) - 1);
  EXPECT_EQ(hit, 8);
  const PageNeed need = bm.need(b, hit, int32_t(tb.size()));
  EXPECT_EQ(need.full, 2);  // pages 2 and 3 are new; pages 0, 1 are held by a, not idle
  bm.allocate(b, hit, int32_t(tb.size()));
  EXPECT_EQ(b.full[0], a.full[0]);
  EXPECT_EQ(b.full[1], a.full[1]);
  EXPECT_NE(b.full[2], a.full[2]);
  EXPECT_EQ(bm.full_pool().refcount(a.full[0]), 2);
  const SeqPages* live[] = {&a, &b};
  bm.check_invariants(live);
  // A request equal to a's tokens may not take the whole prompt from the cache.
  SeqPages c;
  EXPECT_EQ(bm.find_cached_prefix(c, iota_tokens(12), 11), 8);
  EXPECT_EQ(bm.find_cached_prefix(c, iota_tokens(13), 12), 12);
  bm.release(a);
  bm.release(b);
  bm.check_invariants({});
}

TEST(BlockManager, RevivingIdleCachedPagesCountsAgainstTheFreePool) {
  BlockManager bm(spec(8, 8), true);
  SeqPages a;
  auto t = iota_tokens(16);
  run(bm, a, t, 0, 16);
  bm.release(a);  // 4 full pages, all idle cached now
  EXPECT_EQ(bm.full_pool().num_idle_cached(), 4);
  SeqPages b;
  const int32_t hit = bm.find_cached_prefix(b, t, 15);
  EXPECT_EQ(hit, 12);
  const PageNeed need = bm.need(b, hit, 16);
  EXPECT_EQ(need.full, 3 + 1);  // three revived pages, one new
  bm.allocate(b, hit, 16);
  EXPECT_EQ(bm.full_pool().num_free(), 8 - 4);
  const SeqPages* live[] = {&b};
  bm.check_invariants(live);
  bm.release(b);
}

// The sliding rule: resuming at k pages needs the sliding pages of the window before k*P in the cache.
int32_t brute_force_hit(const BlockManager& bm, const SeqPages& s, int32_t max_pages) {
  const int32_t p = bm.page_size();
  for (int32_t k = max_pages; k > 0; --k) {
    bool ok = true;
    for (int32_t j = 0; j < k && ok; ++j) ok = bm.full_pool().lookup(s.hashes[size_t(j)]).has_value();
    for (int32_t j = bm.first_window_page(k * p); j < k && ok; ++j)
      ok = !bm.has_sliding() || bm.sliding_pool().lookup(s.hashes[size_t(j)]).has_value();
    if (ok) return k * p;
  }
  return 0;
}

TEST(BlockManager, PrefixHitIsLimitedToWhereTheSlidingWindowIsCached) {
  // A sliding pool so small that a long sequence's early sliding pages get evicted by later ones.
  BlockManager bm(spec(64, 5, 8, 4), true);
  SeqPages a;
  const auto t = iota_tokens(40);
  run(bm, a, t, 0, 1);
  bm.release(a);
  // Evict some idle sliding pages: take 3 fresh sliding pages with an unrelated sequence.
  SeqPages other;
  bm.allocate(other, 0, 12);
  SeqPages b;
  const int32_t hit = bm.find_cached_prefix(b, t, 39);
  EXPECT_EQ(hit, brute_force_hit(bm, b, 39 / 4));
  EXPECT_LT(hit, 36);                              // the window pages of 36 were evicted...
  EXPECT_GT(bm.full_pool().num_idle_cached(), 8);  // ...although the full pages are all still cached
  bm.release(other);
}

// Random workload on the block manager alone: invariants after every operation, hits equal the brute force.
TEST(BlockManager, RandomWorkloadKeepsInvariants) {
  std::mt19937 rng(2024);
  for (int32_t window : {0, 6, 8}) {
    BlockManager bm(spec(80, window ? 24 : 0, window, 4), true);
    struct Live {
      SeqPages pages;
      std::vector<int32_t> tokens;
      int32_t computed = 0;
    };
    std::vector<std::unique_ptr<Live>> live;
    int hits = 0;
    for (int op = 0; op < 4000; ++op) {
      const int kind = int(rng() % 10);
      if (kind < 3 && live.size() < 6) {
        auto s = std::make_unique<Live>();
        // Prompts from a small alphabet with shared beginnings.
        const int32_t len = 2 + int32_t(rng() % 30);
        const int32_t family = int32_t(rng() % 3);
        for (int32_t i = 0; i < len; ++i) s->tokens.push_back(i < 12 ? family * 100 + i : int32_t(rng() % 4));
        const int32_t hit = bm.find_cached_prefix(s->pages, s->tokens, len - 1);
        ASSERT_EQ(hit, brute_force_hit(bm, s->pages, (len - 1) / 4));
        hits += hit > 0;
        const int32_t end = std::min(len, hit + 1 + int32_t(rng() % 12));
        if (!bm.can_allocate(bm.need(s->pages, hit, end))) continue;
        bm.allocate(s->pages, hit, end);
        bm.commit(s->pages, s->tokens, end);
        s->computed = end;
        live.push_back(std::move(s));
      } else if (kind < 8 && !live.empty()) {
        Live& s = *live[rng() % live.size()];
        if (s.computed == int32_t(s.tokens.size())) s.tokens.push_back(int32_t(rng() % 4));
        const int32_t end = std::min<int32_t>(int32_t(s.tokens.size()), s.computed + 1 + int32_t(rng() % 6));
        bm.release_out_of_window(s.pages, s.computed);
        if (!bm.can_allocate(bm.need(s.pages, s.computed, end))) continue;
        bm.allocate(s.pages, s.computed, end);
        bm.commit(s.pages, s.tokens, end);
        s.computed = end;
      } else if (!live.empty()) {
        const size_t i = rng() % live.size();
        bm.release(live[i]->pages);
        live.erase(live.begin() + std::ptrdiff_t(i));
      }
      std::vector<const SeqPages*> held;
      for (auto& s : live) held.push_back(&s->pages);
      ASSERT_NO_THROW(bm.check_invariants(held)) << "op " << op;
    }
    for (auto& s : live) bm.release(s->pages);
    bm.check_invariants({});
    EXPECT_EQ(bm.full_pool().num_used(), 0);
    EXPECT_EQ(bm.sliding_pool().num_used(), 0);
    EXPECT_GT(bm.full_pool().num_evictions(), 0);
    EXPECT_GT(hits, 50) << "window " << window;
  }
}

TEST(BlockManager, CheckerCatchesAMissingHolder) {
  BlockManager bm(spec(16, 8), true);
  SeqPages a;
  run(bm, a, iota_tokens(6), 0, 6);
  EXPECT_THROW(bm.check_invariants({}), InternalError);  // a's pages look leaked
  bm.release(a);
  bm.check_invariants({});
}

}  // namespace
}  // namespace orchid::engine
