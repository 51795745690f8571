#include "engine/page_pool.h"

#include <gtest/gtest.h>

#include <random>
#include <unordered_map>

#include "core/error.h"

namespace orchid::engine {
namespace {

PageHash key(uint64_t i) {
  return PageHash{i, ~i};
}

TEST(PagePool, AllocatesEveryPageOnceAndTakesThemBack) {
  PagePool pool(8, "full");
  std::vector<int32_t> pages;
  for (int i = 0; i < 8; ++i) pages.push_back(pool.allocate());
  std::sort(pages.begin(), pages.end());
  EXPECT_EQ(pages, (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(pool.num_free(), 0);
  EXPECT_THROW(pool.allocate(), InternalError);
  for (int32_t p : pages) pool.unref(p);
  EXPECT_EQ(pool.num_free(), 8);
  pool.check_invariants(std::vector<int32_t>(8, 0));
  EXPECT_THROW(pool.unref(3), InternalError);  // double free
}

TEST(PagePool, CachedPagesStayReadableUntilEvictedInLruOrder) {
  PagePool pool(4, "full");
  const int32_t a = pool.allocate(), b = pool.allocate(), c = pool.allocate();
  pool.register_page(a, key(1));
  pool.register_page(b, key(2));
  pool.register_page(c, key(3));
  pool.unref(b);  // released first: evicted first
  pool.unref(a);
  pool.unref(c);
  EXPECT_EQ(pool.num_idle_cached(), 3);
  EXPECT_EQ(pool.num_free(), 4);
  EXPECT_EQ(pool.lookup(key(2)), b);
  // A hit revives a: it leaves the LRU list.
  pool.ref(a);
  EXPECT_EQ(pool.num_free(), 3);
  const int32_t d = pool.allocate();  // the never-cached page first
  EXPECT_NE(d, a);
  EXPECT_EQ(pool.lookup(key(2)), b);
  const int32_t e = pool.allocate();  // now an eviction: b, the least recently released
  EXPECT_EQ(e, b);
  EXPECT_FALSE(pool.lookup(key(2)).has_value());
  EXPECT_EQ(pool.lookup(key(3)), c);
  EXPECT_EQ(pool.num_evictions(), 1);
  std::vector<int32_t> refs(4, 0);
  refs[size_t(a)] = refs[size_t(d)] = refs[size_t(e)] = 1;
  pool.check_invariants(refs);
  // The checker notices a wrong holder count.
  refs[size_t(a)] = 2;
  EXPECT_THROW(pool.check_invariants(refs), InternalError);
}

TEST(PagePool, SameContentIsCachedOnce) {
  PagePool pool(4, "full");
  const int32_t a = pool.allocate(), b = pool.allocate();
  pool.register_page(a, key(9));
  pool.register_page(b, key(9));  // a duplicate stays private
  EXPECT_EQ(pool.lookup(key(9)), a);
  EXPECT_EQ(pool.key_of(b), nullptr);
  pool.unref(b);
  EXPECT_EQ(pool.num_idle_cached(), 0);  // uncached: straight back to the free list
  pool.unref(a);
  EXPECT_EQ(pool.num_idle_cached(), 1);
  pool.check_invariants(std::vector<int32_t>(4, 0));
}

}  // namespace
}  // namespace orchid::engine

namespace orchid::engine {
namespace {

// Random inserts and erases against std::unordered_map, with keys crowded onto a few home slots so that
// probe runs wrap around the table and deletions shift entries back.
TEST(PageHashMap, BehavesLikeAMap) {
  std::mt19937_64 rng(3);
  for (uint64_t homes : {4ull, 64ull, 1ull << 40}) {
    PageHashMap map(200);
    std::unordered_map<uint64_t, int32_t> ref;
    std::vector<uint64_t> keys;
    for (int op = 0; op < 20000; ++op) {
      const uint64_t hi = rng() % 300;
      const PageHash k{(hi * 0x9E3779B97F4A7C15ull) % homes + 509 /*near the end of the table*/, hi};
      if (rng() % 2 && ref.size() < 200) {
        const bool fresh = !ref.count(hi);
        EXPECT_EQ(map.insert(k, int32_t(hi)), fresh);
        ref.emplace(hi, int32_t(hi));
      } else if (ref.count(hi)) {
        map.erase(k);
        ref.erase(hi);
      }
      ASSERT_EQ(map.size(), int32_t(ref.size()));
      if (op % 97 == 0) {
        for (uint64_t h = 0; h < 300; ++h) {
          const PageHash q{(h * 0x9E3779B97F4A7C15ull) % homes + 509, h};
          ASSERT_EQ(map.find(q), ref.count(h) ? int32_t(h) : -1) << "op " << op << " key " << h;
        }
      }
    }
  }
}

}  // namespace
}  // namespace orchid::engine
