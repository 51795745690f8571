// Exhaustive checks of the scalar formats against independent references: every encoding is decoded from
// its bit fields by a second formula, and rounding is checked against a brute-force nearest-value search
// with ties to the even code.
#include "core/dtypes.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace orchid {
namespace {

// Brute force: the code whose value is nearest to x; ties go to the code with an even low bit.
template <typename Decode>
int nearest_code(double x, const std::vector<int>& codes, Decode decode) {
  int best = -1;
  double best_d = std::numeric_limits<double>::infinity();
  for (int c : codes) {
    double d = std::fabs(double(decode(c)) - x);
    if (d < best_d || (d == best_d && (c & 1) == 0 && (best & 1) == 1)) {
      best = c;
      best_d = d;
    }
  }
  return best;
}

TEST(Bf16, RoundTripAllPatterns) {
  for (uint32_t b = 0; b < 65536; ++b) {
    float f = bf16_to_float(uint16_t(b));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(f))));
      continue;
    }
    EXPECT_EQ(float_to_bf16(f), b) << b;
  }
}

TEST(Bf16, RoundsToNearestEvenOnEveryFloatWithStride) {
  // Every 97th float pattern: the two bf16 neighbours bracket it; the nearer wins, ties to even.
  for (uint64_t u = 0; u < (1ull << 32); u += 97) {
    float f = std::bit_cast<float>(uint32_t(u));
    if (std::isnan(f)) continue;
    uint16_t lo = uint16_t(uint32_t(u) >> 16);  // truncation toward zero in magnitude
    uint16_t hi = uint16_t(lo + 1);
    double vf = f, vlo = bf16_to_float(lo), vhi = bf16_to_float(hi);
    // IEEE: past the largest finite value, the next step up is 2^128 (rounds to infinity).
    if (std::isinf(vhi)) vhi = std::copysign(std::ldexp(1.0, 128), vf);
    uint16_t expect;
    if (std::isinf(f))
      expect = lo;
    else if (std::fabs(vf - vlo) < std::fabs(vhi - vf))
      expect = lo;
    else if (std::fabs(vf - vlo) > std::fabs(vhi - vf))
      expect = hi;
    else
      expect = (lo & 1) ? hi : lo;
    ASSERT_EQ(float_to_bf16(f), expect) << "pattern " << u;
  }
}

TEST(Bf16, NanStaysNan) {
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::nanf("")))));
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::bit_cast<float>(0x7f800001u)))));
}

double fp8_reference_decode(int b) {
  int s = (b >> 7) & 1, e = (b >> 3) & 15, m = b & 7;
  if (e == 15 && m == 7) return std::numeric_limits<double>::quiet_NaN();
  double v = e == 0 ? m * std::pow(2.0, -9) : (8 + m) * std::pow(2.0, e - 10);
  return s ? -v : v;
}

TEST(Fp8E4M3, DecodeAllPatterns) {
  for (int b = 0; b < 256; ++b) {
    double ref = fp8_reference_decode(b);
    float got = fp8e4m3_to_float(uint8_t(b));
    if (std::isnan(ref))
      EXPECT_TRUE(std::isnan(got)) << b;
    else
      EXPECT_EQ(double(got), ref) << b;
  }
  EXPECT_EQ(fp8e4m3_to_float(0x7e), 448.0f);
}

TEST(Fp8E4M3, EncodeMatchesBruteForceNearest) {
  std::vector<int> pos_codes;
  for (int b = 0; b < 0x7f; ++b) pos_codes.push_back(b);  // all finite non-negative codes
  std::mt19937 rng(1);
  std::vector<float> xs;
  for (int b = 0; b < 0x7f; ++b) {  // every code, every midpoint, and points just around them
    double v = fp8_reference_decode(b), next = b + 1 < 0x7f ? fp8_reference_decode(b + 1) : 480.0;
    double mid = (v + next) / 2;
    for (double x : {v, mid}) {
      xs.push_back(float(x));
      xs.push_back(std::nextafter(float(x), 0.0f));
      xs.push_back(std::nextafter(float(x), 1e9f));
    }
  }
  std::uniform_real_distribution<float> u(0.0f, 500.0f);
  std::uniform_real_distribution<float> l(-12.0f, 9.0f);
  for (int i = 0; i < 200000; ++i) xs.push_back(i % 2 ? u(rng) : std::exp2(l(rng)));
  for (float x : xs) {
    int want = x >= 448.0f ? 0x7e : nearest_code(x, pos_codes, fp8_reference_decode);
    ASSERT_EQ(float_to_fp8e4m3(x), want) << x;
    ASSERT_EQ(float_to_fp8e4m3(-x), want | 0x80) << -x;
  }
  EXPECT_EQ(float_to_fp8e4m3(1e30f), 0x7e);  // saturates
  EXPECT_EQ(float_to_fp8e4m3(-std::numeric_limits<float>::infinity()), 0xfe);
  EXPECT_TRUE(std::isnan(fp8e4m3_to_float(float_to_fp8e4m3(std::nanf("")))));
}

TEST(E8M0, AllPatterns) {
  for (int b = 0; b < 255; ++b) EXPECT_EQ(double(e8m0_to_float(uint8_t(b))), std::pow(2.0, b - 127)) << b;
  EXPECT_TRUE(std::isnan(e8m0_to_float(255)));
}

double e2m1_reference_decode(int n) {
  int s = (n >> 3) & 1, e = (n >> 1) & 3, m = n & 1;
  double v = e == 0 ? 0.5 * m : (1.0 + 0.5 * m) * std::pow(2.0, e - 1);
  return s ? -v : v;
}

TEST(E2M1, DecodeAndEncode) {
  for (int n = 0; n < 16; ++n) EXPECT_EQ(double(e2m1_to_float(uint8_t(n))), e2m1_reference_decode(n)) << n;
  std::vector<int> codes = {0, 1, 2, 3, 4, 5, 6, 7};
  for (int i = 0; i <= 7000; ++i) {
    float x = float(i) / 1000.0f;
    int want = x >= 6.0f ? 7 : nearest_code(x, codes, e2m1_reference_decode);
    ASSERT_EQ(float_to_e2m1(x), want) << x;
    ASSERT_EQ(float_to_e2m1(-x), want | 8) << -x;
  }
  EXPECT_EQ(float_to_e2m1(0.25f), 0);  // tie between 0 and 0.5: even code 0
  EXPECT_EQ(float_to_e2m1(2.5f), 4);   // tie between 2 and 3: even code 4 (=2.0)
  EXPECT_EQ(float_to_e2m1(5.0f), 6);   // tie between 4 and 6: even code 6 (=4.0)
}

TEST(DType, NamesRoundTrip) {
  for (auto name : {"F32", "F16", "BF16", "F8_E4M3", "U8", "I8", "I16", "I32", "I64", "U16", "U32", "U64",
                    "F64", "BOOL"}) {
    DType t;
    ASSERT_TRUE(parse_dtype(name, &t)) << name;
    EXPECT_EQ(dtype_name(t), name);
  }
  DType t;
  EXPECT_FALSE(parse_dtype("F4", &t));
  EXPECT_EQ(dtype_size(DType::kBF16), 2u);
  EXPECT_EQ(dtype_size(DType::kI64), 8u);
}

}  // namespace
}  // namespace orchid
