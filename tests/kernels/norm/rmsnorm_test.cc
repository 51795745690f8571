// Fused residual add + RMSNorm against a double-precision reference on random rows: hidden sizes from 8 to
// 32768 (gpt-oss: 2880), odd row counts, zero rows, with and without the residual delta. The updated
// residual must equal the fp32 sum exactly; the bf16 output must be within one bf16 ulp of the exact value's
// rounding, and every element must be written.
#include "kernels/norm/rmsnorm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <sstream>
#include <vector>

#include "tests/kernels/gpu_test_util.h"

namespace orchid::kernels::norm {
namespace {

using orchid::testing::DeviceBuffer;
using orchid::testing::kPoisonBf16;

int ordered(uint16_t b) {
  return (b & 0x8000) ? -int(b & 0x7fff) : int(b);
}

void run_case(int64_t rows, int64_t hidden, bool with_delta, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const size_t n = size_t(rows * hidden);
  std::normal_distribution<float> rd(0.0f, 3.0f), gd(1.0f, 0.3f);
  std::vector<float> residual(n), gamma(static_cast<size_t>(hidden));
  for (auto& x : residual) x = rd(rng);
  for (int64_t r = 0; r < rows; r += 7)  // some rows of very different scale
    for (int64_t c = 0; c < hidden; ++c) residual[size_t(r * hidden + c)] *= 1e-3f * float(r % 5 + 1);
  for (auto& g : gamma) g = gd(rng);
  const std::vector<uint16_t> delta = orchid::testing::random_bf16(rng, n, 1.0f);

  DeviceBuffer<float> d_res(residual), d_gamma(gamma);
  DeviceBuffer<uint16_t> d_delta(delta), d_out(std::vector<uint16_t>(n, kPoisonBf16));
  rmsnorm_residual(d_res.get(), with_delta ? reinterpret_cast<const __nv_bfloat16*>(d_delta.get()) : nullptr,
                   d_gamma.get(), reinterpret_cast<__nv_bfloat16*>(d_out.get()), rows, hidden, 1e-5f,
                   nullptr);
  ORCHID_CUDA_CHECK(cudaGetLastError());
  ORCHID_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> res_got = d_res.download();
  const std::vector<uint16_t> out_got = d_out.download();

  size_t res_bad = 0, out_bad = 0, off_by_one = 0;
  int64_t first_res = -1, first_out = -1;
  std::string first_out_text;
  double err2 = 0, ref2 = 0;
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<float> t(static_cast<size_t>(hidden));
    double ss = 0;
    for (int64_t c = 0; c < hidden; ++c) {
      const size_t i = size_t(r * hidden + c);
      t[size_t(c)] = with_delta ? residual[i] + bf16_to_float(delta[i]) : residual[i];
      if (res_got[i] != t[size_t(c)] && res_bad++ == 0) first_res = int64_t(i);
      ss += double(t[size_t(c)]) * t[size_t(c)];
    }
    const double inv = 1.0 / std::sqrt(ss / double(hidden) + 1e-5);
    for (int64_t c = 0; c < hidden; ++c) {
      const size_t i = size_t(r * hidden + c);
      const double want = double(t[size_t(c)]) * inv * double(gamma[size_t(c)]);
      const uint16_t want_bits = float_to_bf16(float(want));
      const int d = std::abs(ordered(out_got[i]) - ordered(want_bits));
      const bool nan = std::isnan(bf16_to_float(out_got[i]));
      if (nan || d > 1) {
        if (out_bad++ == 0) {
          first_out = int64_t(i);
          std::ostringstream s;
          s << "row " << r << " col " << c << " got " << bf16_to_float(out_got[i]) << " want " << want;
          first_out_text = s.str();
        }
      } else {
        off_by_one += d;
        err2 += (bf16_to_float(out_got[i]) - want) * (bf16_to_float(out_got[i]) - want);
      }
      ref2 += want * want;
    }
  }
  const double rel_l2 = ref2 > 0 ? std::sqrt(err2 / ref2) : 0.0;
  std::printf(
      "    rows %lld hidden %lld delta %d: residual mismatches %zu, out > 1 ulp/NaN %zu, 1 ulp %zu, "
      "rel_l2 %.3g\n",
      (long long)rows, (long long)hidden, int(with_delta), res_bad, out_bad, off_by_one, rel_l2);
  EXPECT_EQ(res_bad, 0u) << "residual differs from the fp32 sum, first at element " << first_res;
  EXPECT_EQ(out_bad, 0u) << "out: first bad " << first_out << ": " << first_out_text;
  EXPECT_LE(double(off_by_one), 0.01 * double(n) + 2);
  EXPECT_LE(rel_l2, 5e-3);
  if (!with_delta) {
    EXPECT_EQ(res_got, residual);  // untouched
  }
}

class RmsNorm : public ::testing::Test {
 protected:
  void SetUp() override { ORCHID_REQUIRE_GPU_OR_SKIP(); }
  uint64_t seed_ = orchid::testing::test_seed();
};

TEST_F(RmsNorm, SmallShapes) {
  SCOPED_TRACE("ORCHID_TEST_SEED=" + std::to_string(seed_));
  uint64_t k = 0;
  for (int64_t hidden : {8, 24, 2880, 4104})
    for (int64_t rows : {1, 7, 33})
      for (bool delta : {true, false}) run_case(rows, hidden, delta, seed_ + ++k);
}

TEST_F(RmsNorm, GptOssAndLargeHidden) {
  SCOPED_TRACE("ORCHID_TEST_SEED=" + std::to_string(seed_));
  run_case(1000, 2880, true, seed_);
  run_case(3, 32768, true, seed_ + 1);
  run_case(5, 16392, false, seed_ + 2);
}

// rmsnorm_residual_split: fp32 delta (or none); the residual is the exact fp32 sum, out_hi is what the
// BF16 variant writes (within one ulp of the exact rounding) and out_hi + out_lo is the fp32 value to ~2^-16.
void run_split_case(int64_t rows, int64_t hidden, bool with_delta, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const size_t n = size_t(rows * hidden);
  std::normal_distribution<float> rd(0.0f, 3.0f), gd(1.0f, 0.3f), dd(0.0f, 1.0f);
  std::vector<float> residual(n), gamma(static_cast<size_t>(hidden)), delta(n);
  for (auto& x : residual) x = rd(rng);
  for (auto& g : gamma) g = gd(rng);
  for (auto& d : delta) d = dd(rng);
  DeviceBuffer<float> d_res(residual), d_gamma(gamma), d_delta(delta);
  DeviceBuffer<uint16_t> d_hi(std::vector<uint16_t>(n, kPoisonBf16)),
      d_lo(std::vector<uint16_t>(n, kPoisonBf16));
  rmsnorm_residual_split(d_res.get(), with_delta ? d_delta.get() : nullptr, d_gamma.get(),
                         reinterpret_cast<__nv_bfloat16*>(d_hi.get()),
                         reinterpret_cast<__nv_bfloat16*>(d_lo.get()), rows, hidden, 1e-5f, nullptr);
  ORCHID_CUDA_CHECK(cudaGetLastError());
  ORCHID_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> res_got = d_res.download();
  const std::vector<uint16_t> hi = d_hi.download(), lo = d_lo.download();
  size_t res_bad = 0, hi_bad = 0;
  double err2_split = 0, err2_hi = 0, ref2 = 0;
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<float> t(static_cast<size_t>(hidden));
    double ss = 0;
    for (int64_t c = 0; c < hidden; ++c) {
      const size_t i = size_t(r * hidden + c);
      t[size_t(c)] = with_delta ? residual[i] + delta[i] : residual[i];
      res_bad += res_got[i] != t[size_t(c)];
      ss += double(t[size_t(c)]) * t[size_t(c)];
    }
    const double inv = 1.0 / std::sqrt(ss / double(hidden) + 1e-5);
    for (int64_t c = 0; c < hidden; ++c) {
      const size_t i = size_t(r * hidden + c);
      const double want = double(t[size_t(c)]) * inv * double(gamma[size_t(c)]);
      hi_bad += std::abs(ordered(hi[i]) - ordered(float_to_bf16(float(want)))) > 1 ||
                std::isnan(bf16_to_float(hi[i])) || std::isnan(bf16_to_float(lo[i]));
      const double got = double(bf16_to_float(hi[i])) + double(bf16_to_float(lo[i]));
      err2_split += (got - want) * (got - want);
      err2_hi += (bf16_to_float(hi[i]) - want) * (bf16_to_float(hi[i]) - want);
      ref2 += want * want;
    }
  }
  if (rows == 0) return;
  const double split = std::sqrt(err2_split / ref2), hi_only = std::sqrt(err2_hi / ref2);
  std::printf("    split rows %lld hidden %lld delta %d: rel_l2 hi+lo %.3g, hi %.3g\n", (long long)rows,
              (long long)hidden, int(with_delta), split, hi_only);
  EXPECT_EQ(res_bad, 0u);
  EXPECT_EQ(hi_bad, 0u);
  EXPECT_LT(split, 2e-5);
  EXPECT_LT(split * 50, hi_only);
}

TEST_F(RmsNorm, SplitOutputKeepsFp32Accuracy) {
  SCOPED_TRACE("ORCHID_TEST_SEED=" + std::to_string(seed_));
  run_split_case(1, 2880, true, seed_);
  run_split_case(37, 2880, true, seed_ + 1);
  run_split_case(9, 24, false, seed_ + 2);
  run_split_case(0, 2880, true, seed_ + 3);
}

TEST_F(RmsNorm, SmallZeroRows) {
  SCOPED_TRACE("ORCHID_TEST_SEED=" + std::to_string(seed_));
  run_case(0, 2880, true, seed_);
}

}  // namespace
}  // namespace orchid::kernels::norm
