// The dense BF16 GEMM vs an fp64 CPU reference, at the model's shapes (QKV, O-proj, router, lm_head), odd
// and single-row M, strided operands, bf16 and fp32 outputs, with and without bias; and the split-input
// product of precise layers (an fp32 activation as two BF16 halves, the second call accumulating). Shapes of
// at most 16 rows run twice: through cuBLASLt and through orchid's small_m_gemm, each forced. Through
// cuBLASLt every candidate algorithm runs: the heuristic's, and its first split 2-6 ways over k where
// cuBLASLt accepts that (any may be the one timed fastest at first use).
#include "kernels/gemm/dense_gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <random>

#include "kernel_reference.h"
#include "kernel_test_util.h"
#include "kernels/gemm/small_m_gemm.h"

namespace orchid::kernels {
namespace {

using orchid::testing::DeviceBuffer;

struct Case {
  const char* name;
  int m, n, k;
  int64_t ldx, ldy;  // 0: packed
  GemmOut out;
  bool bias;
};

// `algorithm` >= 0: that cuBLASLt candidate; -1: the choice made at first use.
void run_case(const Case& c, DenseGemm::SmallM policy, int algorithm = -1) {
  std::mt19937_64 rng(orchid::testing::named_seed(c.name));
  const int64_t ldx = c.ldx ? c.ldx : c.k, ldy = c.ldy ? c.ldy : c.n;
  auto x = orchid::testing::random_bf16(rng, size_t(c.m) * ldx, 1.0f);
  auto w = orchid::testing::random_bf16(rng, size_t(c.n) * c.k, 1.0f / std::sqrt(float(c.k)));
  auto b16 = orchid::testing::random_bf16(rng, size_t(c.n), 0.5f);
  std::vector<float> bias_f = orchid::testing::bf16_to_floats(b16);

  DeviceBuffer<uint16_t> dx, dw, db16;
  DeviceBuffer<float> db32;
  dx.upload(x);
  dw.upload(w);
  db16.upload(b16);
  db32.upload(bias_f);
  const bool f32 = c.out == GemmOut::kF32;
  DeviceBuffer<uint8_t> dy(size_t(c.m) * ldy * (f32 ? 4 : 2));
  orchid::testing::poison(dy);
  DeviceBuffer<uint8_t> ws(DenseGemm::kRecommendedWorkspace);

  DenseGemm gemm(ws.get(), ws.size());
  gemm.set_small_m(policy);
  const DenseGemm::TimingScope timing;  // as in a graphed decode step's first run
  DenseGemmArgs a;
  a.m = c.m;
  a.n = c.n;
  a.k = c.k;
  a.x = dx.get();
  a.ldx = c.ldx;
  a.w = dw.get();
  a.bias = c.bias ? (f32 ? static_cast<const void*>(db32.get()) : db16.get()) : nullptr;
  a.y = dy.get();
  a.ldy = c.ldy;
  a.out = c.out;
  if (algorithm >= 0) {
    gemm.use_cublas_algorithm(a, algorithm);
    try {
      gemm.run(a, nullptr);
    } catch (const std::exception& e) {
      // The first-use timing skips an algorithm that refuses the call; the heuristic's first must run.
      EXPECT_NE(algorithm, 0) << c.name << ": the heuristic's first algorithm refuses the call: " << e.what();
      std::printf("[info] %s: cuBLASLt algorithm %d refuses the call (%s)\n", c.name, algorithm, e.what());
      return;
    }
  } else {
    gemm.run(a, nullptr);
  }
  ORCHID_TEST_CUDA(cudaDeviceSynchronize());
  const bool ours = gemm.uses_small_m(a);
  EXPECT_EQ(ours, policy == DenseGemm::SmallM::kOrchid);
  if (!ours) {
    EXPECT_GE(gemm.cublas_algorithm(a), 0);
    if (algorithm >= 0) {
      EXPECT_EQ(gemm.cublas_algorithm(a), algorithm);
    }
  }
  const std::string name =
      std::string(c.name) +
      (ours ? " (small_m_gemm)" : " (cuBLASLt algorithm " + std::to_string(gemm.cublas_algorithm(a)) + ")");
  if (c.bias && !ours)
    std::printf("[info] %s: bias %s\n", c.name,
                gemm.bias_fused(a) ? "in the cuBLASLt epilogue" : "separate kernel");

  std::vector<double> ref(size_t(c.m) * c.n);
  const auto xf = orchid::testing::bf16_to_floats(x), wf = orchid::testing::bf16_to_floats(w);
  orchid::ref::gemm(c.m, c.n, c.k, xf.data(), ldx, wf.data(), c.bias ? bias_f.data() : nullptr, ref.data());
  double rms = 0;
  for (double v : ref) rms += v * v;
  rms = std::sqrt(rms / double(ref.size()));

  const auto raw = dy.download();
  std::vector<float> got(size_t(c.m) * c.n);
  int64_t pad_written = 0;
  for (int r = 0; r < c.m; ++r) {
    for (int64_t j = 0; j < ldy; ++j) {
      const size_t at = size_t(r) * ldy + size_t(j);
      float v;
      if (f32) {
        std::memcpy(&v, raw.data() + at * 4, 4);
      } else {
        uint16_t b;
        std::memcpy(&b, raw.data() + at * 2, 2);
        v = bf16_to_float(b);
      }
      if (j < c.n) {
        got[size_t(r) * c.n + size_t(j)] = v;
      } else if (!std::isnan(v)) {
        ++pad_written;
      }
    }
  }
  EXPECT_EQ(pad_written, 0) << "elements between n and ldy were written";
  // bf16 output: one rounding (2^-9 relative) on top of fp32 accumulation; fp32 output: accumulation only.
  const double rtol = f32 ? 1e-3 : 8e-3, atol = (f32 ? 1e-4 : 2e-3) * rms, l2 = f32 ? 1e-4 : 5e-3;
  EXPECT_TRUE(orchid::testing::check_close(name.c_str(), got, ref, atol, rtol, l2));
}

class DenseGemmTest : public ::testing::TestWithParam<Case> {};

TEST_P(DenseGemmTest, MatchesFp64Reference) {
  ORCHID_REQUIRE_GPU_OR_SKIP();
  const Case& c = GetParam();
  run_case(c, DenseGemm::SmallM::kCublas);
  if (c.m <= kSmallMGemmMaxRows && c.k % 32 == 0) run_case(c, DenseGemm::SmallM::kOrchid);
}

TEST_P(DenseGemmTest, EveryCublasAlgorithmMatches) {
  ORCHID_REQUIRE_GPU_OR_SKIP();
  const Case& c = GetParam();
  DeviceBuffer<uint8_t> ws(DenseGemm::kRecommendedWorkspace);
  DenseGemm gemm(ws.get(), ws.size());
  DenseGemmArgs a;
  a.m = c.m, a.n = c.n, a.k = c.k, a.ldx = c.ldx, a.ldy = c.ldy, a.out = c.out;
  a.bias = c.bias ? ws.get() : nullptr;  // only whether there is one matters to the plan
  const int n = gemm.cublas_algorithms(a);
  ASSERT_GE(n, 1);
  std::printf("[info] %s: %d cuBLASLt algorithms\n", c.name, n);
  for (int i = 0; i < n; ++i) run_case(c, DenseGemm::SmallM::kCublas, i);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, DenseGemmTest,
    ::testing::Values(Case{"qkv_decode_m1", 1, 5120, 2880, 0, 0, GemmOut::kBf16, true},
                      Case{"qkv_prefill_m67", 67, 5120, 2880, 0, 0, GemmOut::kBf16, true},
                      Case{"oproj_m37", 37, 2880, 4096, 0, 0, GemmOut::kBf16, true},
                      Case{"router20b_m129_f32", 129, 32, 2880, 0, 0, GemmOut::kF32, true},
                      Case{"router120b_m5_f32", 5, 128, 2880, 0, 0, GemmOut::kF32, true},
                      Case{"lmhead_m3_f32", 3, 201088, 2880, 0, 0, GemmOut::kF32, false},
                      Case{"m257_nobias_bf16", 257, 640, 2880, 0, 0, GemmOut::kBf16, false},
                      Case{"strided_m17", 17, 512, 1024, 1536, 640, GemmOut::kBf16, true},
                      Case{"strided_m9_f32", 9, 96, 1024, 1040, 104, GemmOut::kF32, true},
                      Case{"qkv_m16", 16, 5120, 2880, 0, 0, GemmOut::kBf16, true},
                      Case{"oproj_m8", 8, 2880, 4096, 0, 0, GemmOut::kBf16, true},
                      Case{"router_split_m2_f32", 2, 32, 2880, 0, 0, GemmOut::kF32, false},
                      Case{"n40_k96_m13_f32", 13, 40, 96, 0, 0, GemmOut::kF32, true},
                      Case{"lmhead_m1_f32", 1, 201088, 2880, 0, 0, GemmOut::kF32, false},
                      // a ragged last 16-row block, strided rows with m > 8, m = 16 at k = 4096
                      Case{"ragged_m3_f32", 3, 1061, 1120, 0, 0, GemmOut::kF32, true},
                      Case{"strided_m11_k2880", 11, 1100, 2880, 3072, 1104, GemmOut::kBf16, false},
                      Case{"m16_k4096", 16, 2888, 4096, 0, 0, GemmOut::kBf16, false}),
    [](const ::testing::TestParamInfo<Case>& i) { return std::string(i.param.name); });

// y = x W^T + b with x fp32 (not BF16-representable), computed as hi W^T + b, then += lo W^T where
// hi = bf16(x), lo = bf16(x - hi): close to the fp32 product, far closer than the hi half alone.
void run_split_case(const char* name, int m, int n, int k,
                    DenseGemm::SmallM policy = DenseGemm::SmallM::kCublas) {
  std::mt19937_64 rng(orchid::testing::named_seed(name));
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(size_t(m) * k);
  for (float& v : x) v = nd(rng);
  std::vector<uint16_t> hi(x.size()), lo(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    hi[i] = float_to_bf16(x[i]);
    lo[i] = float_to_bf16(x[i] - bf16_to_float(hi[i]));
  }
  auto w = orchid::testing::random_bf16(rng, size_t(n) * k, 1.0f / std::sqrt(float(k)));
  std::vector<float> bias(static_cast<size_t>(n));
  for (float& v : bias) v = 0.5f * nd(rng);
  DeviceBuffer<uint16_t> dhi, dlo, dw;
  DeviceBuffer<float> db, dy(size_t(m) * n);
  dhi.upload(hi);
  dlo.upload(lo);
  dw.upload(w);
  db.upload(bias);
  DeviceBuffer<uint8_t> ws(DenseGemm::kRecommendedWorkspace);
  DenseGemm gemm(ws.get(), ws.size());
  gemm.set_small_m(policy);
  const DenseGemm::TimingScope timing;  // as in a graphed decode step's first run
  DenseGemmArgs a;
  a.m = m;
  a.n = n;
  a.k = k;
  a.x = dhi.get();
  a.w = dw.get();
  a.bias = db.get();
  a.y = dy.get();
  a.out = GemmOut::kF32;
  gemm.run(a, nullptr);
  ORCHID_TEST_CUDA(cudaDeviceSynchronize());
  const std::vector<float> hi_only = dy.download();
  a.x = dlo.get();
  a.bias = nullptr;
  a.accumulate = true;
  gemm.run(a, nullptr);
  ORCHID_TEST_CUDA(cudaDeviceSynchronize());
  const std::vector<float> split = dy.download();

  std::vector<double> ref(size_t(m) * n);
  const auto wf = orchid::testing::bf16_to_floats(w);
  orchid::ref::gemm(m, n, k, x.data(), k, wf.data(), bias.data(), ref.data());
  auto rel_l2 = [&](const std::vector<float>& got) {
    double num = 0, den = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      num += (double(got[i]) - ref[i]) * (double(got[i]) - ref[i]);
      den += ref[i] * ref[i];
    }
    return std::sqrt(num / den);
  };
  const double e_split = rel_l2(split), e_hi = rel_l2(hi_only);
  std::printf("[info] %s: relative L2 vs fp64 on the fp32 input: hi+lo %.3e, hi only %.3e\n", name, e_split,
              e_hi);
  EXPECT_LT(e_split, 2e-5) << name;
  EXPECT_LT(e_split * 20, e_hi) << name;
}

TEST(DenseGemmSplitInput, ReachesFp32Accuracy) {
  ORCHID_REQUIRE_GPU_OR_SKIP();
  run_split_case("split_qkv_m67", 67, 5120, 2880);
  run_split_case("split_oproj_m37", 37, 2880, 4096);
  run_split_case("split_router_m129", 129, 32, 2880);
  run_split_case("split_m1", 1, 5120, 2880);
  run_split_case("split_m1_small_m_gemm", 1, 5120, 2880, DenseGemm::SmallM::kOrchid);
  run_split_case("split_oproj_m7_small_m_gemm", 7, 2880, 4096, DenseGemm::SmallM::kOrchid);
}

// First-use timing runs only inside a TimingScope (the runtime's graphed decode steps), so that prefill
// chunks of ever-new row counts never stall on it; outside, a shape runs the heuristic's first algorithm
// undecided, and once an instance has timed it every instance of the process takes that choice.
TEST(DenseGemmTiming, OnlyInsideATimingScope) {
  ORCHID_REQUIRE_GPU_OR_SKIP();
  if (const char* v = std::getenv("ORCHID_GEMM_ALGO"); v && std::strcmp(v, "heuristic") == 0)
    GTEST_SKIP() << "ORCHID_GEMM_ALGO=heuristic: nothing is timed";
  DeviceBuffer<uint8_t> ws(DenseGemm::kRecommendedWorkspace), ws2(DenseGemm::kRecommendedWorkspace);
  DeviceBuffer<uint16_t> x(size_t(41) * 1024), w(size_t(1536) * 1024), y(size_t(41) * 1536);
  ORCHID_TEST_CUDA(cudaMemset(x.get(), 0, x.size() * 2));
  ORCHID_TEST_CUDA(cudaMemset(w.get(), 0, w.size() * 2));
  DenseGemmArgs a;  // a shape no other test of the process runs
  a.m = 41;
  a.n = 1536;
  a.k = 1024;
  a.x = x.get();
  a.w = w.get();
  a.y = y.get();
  DenseGemm gemm(ws.get(), ws.size());
  gemm.set_small_m(DenseGemm::SmallM::kCublas);
  if (gemm.cublas_algorithms(a) < 2) GTEST_SKIP() << "the heuristic offers one algorithm: nothing to time";
  gemm.run(a, nullptr);
  ORCHID_TEST_CUDA(cudaDeviceSynchronize());
  EXPECT_EQ(gemm.cublas_algorithm(a), -1) << "timed outside a TimingScope";
  {
    const DenseGemm::TimingScope timing;
    gemm.run(a, nullptr);
    ORCHID_TEST_CUDA(cudaDeviceSynchronize());
  }
  const int chosen = gemm.cublas_algorithm(a);
  EXPECT_GE(chosen, 0);
  DenseGemm other(ws2.get(), ws2.size());  // outside a scope, it takes the choice timed by the first
  other.set_small_m(DenseGemm::SmallM::kCublas);
  other.run(a, nullptr);
  ORCHID_TEST_CUDA(cudaDeviceSynchronize());
  EXPECT_EQ(other.cublas_algorithm(a), chosen);
}

TEST(DenseGemmSplitInput, AccumulateNeedsFp32Output) {
  ORCHID_REQUIRE_GPU_OR_SKIP();
  DeviceBuffer<uint8_t> ws(DenseGemm::kRecommendedWorkspace), buf(1024);
  DenseGemm gemm(ws.get(), ws.size());
  DenseGemmArgs a;
  a.m = a.n = a.k = 8;
  a.x = a.w = a.y = buf.get();
  a.accumulate = true;
  EXPECT_THROW(gemm.run(a, nullptr), std::exception);
}

}  // namespace
}  // namespace orchid::kernels
