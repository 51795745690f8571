#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

namespace orchid {
namespace {

TEST(ThreadPool, CoversRangeExactlyOnce) {
  ThreadPool pool(4);
  for (size_t n : {0, 1, 7, 100, 10007}) {
    std::vector<std::atomic<int>> hits(n);
    pool.parallel_for(n, 3, [&](size_t b, size_t e) {
      for (size_t i = b; i < e; ++i) hits[i]++;
    });
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << i;
  }
}

TEST(ThreadPool, ReusableManyTimes) {
  ThreadPool pool(3);
  std::atomic<long> sum{0};
  for (int r = 0; r < 200; ++r)
    pool.parallel_for(1000, 10, [&](size_t b, size_t e) {
      long s = 0;
      for (size_t i = b; i < e; ++i) s += long(i);
      sum += s;
    });
  EXPECT_EQ(sum.load(), 200L * 999 * 1000 / 2);
}

}  // namespace
}  // namespace orchid
