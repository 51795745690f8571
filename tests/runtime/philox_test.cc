#include "core/philox.h"

#include <gtest/gtest.h>

#include <cmath>

namespace orchid::runtime {
namespace {

// Known-answer vectors of Philox-4x32-10 from Random123's kat_vectors (counter[4], key[2] -> output[4]).
TEST(Philox, Random123KnownAnswers) {
  struct Kat {
    std::array<uint32_t, 4> ctr;
    std::array<uint32_t, 2> key;
    std::array<uint32_t, 4> out;
  };
  const Kat kats[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
       {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
       {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const Kat& k : kats) EXPECT_EQ(Philox4x32::generate(k.ctr, k.key), k.out);
}

TEST(Philox, UniformIsInRangeAndUnbiased) {
  double sum = 0, sum_sq = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    const double u = sampling_uniform(12345, uint32_t(i));
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
    sum_sq += u * u;
  }
  // Mean 1/2 and variance 1/12 within 5 standard errors.
  const double mean = sum / n, var = sum_sq / n - mean * mean;
  EXPECT_NEAR(mean, 0.5, 5 * std::sqrt(1.0 / 12 / n));
  EXPECT_NEAR(var, 1.0 / 12, 5 * std::sqrt(1.0 / 180 / n));
  // A pure function of (seed, index): same inputs, same bits; another seed, another stream.
  EXPECT_EQ(sampling_uniform(7, 3), sampling_uniform(7, 3));
  EXPECT_NE(sampling_uniform(7, 3), sampling_uniform(8, 3));
  EXPECT_NE(sampling_uniform(7, 3), sampling_uniform(7, 4));
}

}  // namespace
}  // namespace orchid::runtime
