#include "engine/metrics.h"

#include <gtest/gtest.h>

namespace orchid::engine {
namespace {

TEST(Histogram, CountsIntoBucketsAndEstimatesQuantiles) {
  Histogram h({1, 2, 4});
  for (double v : {0.5, 1.0, 1.5, 3.0, 10.0}) h.observe(v);
  EXPECT_EQ(h.bucket_counts(), (std::vector<uint64_t>{2, 1, 1, 1}));  // (.., 1] (1, 2] (2, 4] (4, inf)
  EXPECT_EQ(h.count(), 5u);
  EXPECT_DOUBLE_EQ(h.sum(), 16.0);
  EXPECT_DOUBLE_EQ(h.quantile(0.4), 1.0);  // 2 of 5 are <= 1
  EXPECT_DOUBLE_EQ(h.quantile(0.5), 1.5);  // halfway into (1, 2]
  EXPECT_DOUBLE_EQ(h.quantile(1.0), 4.0);  // the +inf bucket reports its lower bound
  EXPECT_EQ(Histogram({1}).quantile(0.5), 0.0);
  const Histogram lat = Histogram::latency_seconds();
  EXPECT_DOUBLE_EQ(lat.upper_bounds().front(), 1e-4);
  EXPECT_DOUBLE_EQ(lat.upper_bounds().back(), 100.0);
}

TEST(RateMeter, AveragesOverItsWindow) {
  RateMeter m(std::chrono::seconds(10));
  const auto t0 = RateMeter::Clock::time_point{} + std::chrono::hours(1);
  for (int i = 0; i < 100; ++i) m.add(t0 + std::chrono::milliseconds(100 * i), 10);  // 100 tokens/s for 10 s
  EXPECT_NEAR(m.rate(t0 + std::chrono::milliseconds(9900)), 100.0, 1.0);
  EXPECT_NEAR(m.rate(t0 + std::chrono::seconds(15)), 50.0, 2.0);  // half of it left the window
  EXPECT_EQ(m.rate(t0 + std::chrono::seconds(30)), 0.0);
}

}  // namespace
}  // namespace orchid::engine
