// FastDivmod (the Hopper prefill kernel's item -> tile, KV head) against / and % on the host: every divisor
// to 300 over small numerators, numerators near multiples and random ones up to 2^31 - 1.
#include "kernels/common/fast_divmod.h"

#include <gtest/gtest.h>

#include <random>

namespace orchid::kernels {
namespace {

TEST(FastDivmod, MatchesIntegerDivision) {
  std::mt19937_64 rng(3);
  std::uniform_int_distribution<uint32_t> big(0, (1u << 31) - 1);
  for (uint32_t d = 1; d <= 300; ++d) {
    const FastDivmod f(d);
    auto check = [&](uint32_t n) {
      uint32_t q, r;
      f.divmod(n, q, r);
      ASSERT_EQ(q, n / d) << n << " / " << d;
      ASSERT_EQ(r, n % d) << n << " % " << d;
    };
    for (uint32_t n = 0; n < 4096; ++n) check(n);
    for (uint32_t k : {1u, 2u, 1000u, (1u << 31) / d - 1}) {
      check(k * d - 1);
      check(k * d);
      check(k * d + 1 < (1u << 31) ? k * d + 1 : k * d);
    }
    for (int i = 0; i < 2000; ++i) check(big(rng));
    check((1u << 31) - 1);
  }
}

}  // namespace
}  // namespace orchid::kernels
