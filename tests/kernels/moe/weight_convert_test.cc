// Load-time weight conversions vs the exact host references of core/dtypes.h, bit for bit:
//  - MXFP4 -> BF16 over every (byte, e8m0 scale) pair (all e2m1 pairs x all finite scales),
//  - the e4m3 encoder over every bf16 value in [-448, 448] (a block whose max is 448 has scale 1),
//  - MXFP4 -> FP8 128x128 blocks with both scale rules, partial row and column blocks, skipped experts,
//  - BF16 -> FP8 128x128 blocks.
#include "kernels/moe/weight_convert.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "kernel_reference.h"
#include "kernel_test_util.h"
#include "mxfp4_problem.h"

namespace orchid::kernels {
namespace {

using orchid::testing::DeviceBuffer;

TEST(WeightConvert, Mxfp4ToBf16AllCodesAllScales) {
  ORCHID_REQUIRE_GPU_OR_SKIP();
  // Row s uses e8m0 scale s (0..254) for all its 16 MX blocks; block b holds bytes 16b..16b+15, so every
  // row covers all 256 byte values (= all ordered e2m1 pairs).
  const int n = 255, k = 512, kb = k / 32;
  std::vector<uint8_t> blocks(size_t(n) * kb * 16), scales(size_t(n) * kb);
  for (int r = 0; r < n; ++r)
    for (int b = 0; b < kb; ++b) {
      scales[size_t(r) * kb + b] = uint8_t(r);
      for (int j = 0; j < 16; ++j) blocks[(size_t(r) * kb + b) * 16 + j] = uint8_t(b * 16 + j);
    }
  DeviceBuffer<uint8_t> db, ds;
  db.upload(blocks);
  ds.upload(scales);
  DeviceBuffer<uint16_t> out(size_t(n) * k);
  orchid::testing::poison(out);
  mxfp4_to_bf16(db.get(), ds.get(), 1, n, k, out.get(), nullptr);
  ORCHID_TEST_CUDA(cudaDeviceSynchronize());
  std::vector<float> f(size_t(n) * k);
  orchid::ref::mxfp4_to_float(blocks.data(), scales.data(), n, k, f.data());
  std::vector<uint16_t> want(f.size());
  for (size_t i = 0; i < f.size(); ++i) want[i] = float_to_bf16(f[i]);
  EXPECT_TRUE(orchid::testing::check_exact("mxfp4->bf16 all codes x scales", out.download(), want));
}

TEST(WeightConvert, Fp8EncoderEveryBf16InRange) {
  ORCHID_REQUIRE_GPU_OR_SKIP();
  // All bf16 values with |v| <= 448, laid out in 128-column rows; every row gets a 448 in column 0, so
  // each 128x128 block's scale is exactly 1 and q = e4m3(v) (both rules agree at amax = 448).
  std::vector<uint16_t> vals;
  for (uint32_t b = 0; b < 65536; ++b) {
    const float v = bf16_to_float(uint16_t(b));
    if (!std::isnan(v) && std::fabs(v) <= 448.0f) vals.push_back(uint16_t(b));
  }
  const int k = 128, per_row = k - 1;
  const int n = int((vals.size() + per_row - 1) / per_row);
  std::vector<uint16_t> w(size_t(n) * k, 0);
  for (int r = 0; r < n; ++r) {
    w[size_t(r) * k] = float_to_bf16(448.0f);
    for (int j = 0; j < per_row; ++j) {
      const size_t i = size_t(r) * per_row + size_t(j);
      if (i < vals.size()) w[size_t(r) * k + 1 + j] = vals[i];
    }
  }
  for (auto rule : {Fp8ScaleRule::kAmaxOver448, Fp8ScaleRule::kPow2}) {
    DeviceBuffer<uint16_t> dw;
    dw.upload(w);
    DeviceBuffer<uint8_t> q(size_t(n) * k);
    DeviceBuffer<float> s(size_t((n + 127) / 128));
    orchid::testing::poison(q);
    orchid::testing::poison(s);
    bf16_to_fp8_block(dw.get(), 1, n, k, rule, q.get(), s.get(), nullptr);
    ORCHID_TEST_CUDA(cudaDeviceSynchronize());
    std::vector<uint8_t> want(w.size());
    for (size_t i = 0; i < w.size(); ++i) want[i] = float_to_fp8e4m3(bf16_to_float(w[i]));
    EXPECT_TRUE(orchid::testing::check_exact("e4m3 encode of every bf16 in range", q.download(), want));
    for (float sc : s.download()) EXPECT_EQ(sc, 1.0f);
  }
}

struct BlockCase {
  const char* name;
  int experts, n, k;
};

// Random MXFP4 weights with a realistic spread of block scales (2^-9 .. 2^-3).
void random_mxfp4(std::mt19937_64& rng, int experts, int n, int k, std::vector<uint8_t>* blocks,
                  std::vector<uint8_t>* scales) {
  blocks->resize(size_t(experts) * n * k / 2);
  scales->resize(size_t(experts) * n * k / 32);
  std::uniform_int_distribution<int> byte(0, 255), sc(118, 124);
  for (auto& b : *blocks) b = uint8_t(byte(rng));
  for (auto& s : *scales) s = uint8_t(sc(rng));
}

class Mxfp4ToFp8Test : public ::testing::TestWithParam<BlockCase> {};

TEST_P(Mxfp4ToFp8Test, MatchesReferenceBothRules) {
  ORCHID_REQUIRE_GPU_OR_SKIP();
  const BlockCase c = GetParam();
  std::mt19937_64 rng(orchid::testing::named_seed(c.name));
  std::vector<uint8_t> blocks, scales;
  random_mxfp4(rng, c.experts, c.n, c.k, &blocks, &scales);
  std::vector<float> wf(size_t(c.experts) * c.n * c.k);
  orchid::ref::mxfp4_to_float(blocks.data(), scales.data(), int64_t(c.experts) * c.n, c.k, wf.data());
  const int kpad = (c.k + 127) / 128 * 128, rb = (c.n + 127) / 128;
  // Expert 1 (if any) receives no rows: its output must stay untouched.
  std::vector<int> offsets(c.experts + 1);
  for (int e = 0; e <= c.experts; ++e) offsets[e] = e <= 1 ? e : e - 1;
  DeviceBuffer<uint8_t> db, ds;
  DeviceBuffer<int> doff;
  db.upload(blocks);
  ds.upload(scales);
  doff.upload(offsets);
  for (auto rule : {Fp8ScaleRule::kAmaxOver448, Fp8ScaleRule::kPow2}) {
    const bool pow2 = rule == Fp8ScaleRule::kPow2;
    DeviceBuffer<uint8_t> q(size_t(c.experts) * c.n * kpad);
    DeviceBuffer<float> s(size_t(c.experts) * rb * (kpad / 128));
    orchid::testing::poison(q);
    orchid::testing::poison(s);
    mxfp4_to_fp8_block(db.get(), ds.get(), c.experts, c.n, c.k, rule, q.get(), s.get(),
                       c.experts > 1 ? doff.get() : nullptr, nullptr);
    ORCHID_TEST_CUDA(cudaDeviceSynchronize());
    std::vector<uint8_t> wq(q.size());
    std::vector<float> ws(s.size());
    orchid::ref::fp8_block_quant(wf.data(), c.experts, c.n, c.k,
                                 pow2 ? orchid::ref::Fp8Rule::kPow2 : orchid::ref::Fp8Rule::kAmaxOver448,
                                 wq.data(), ws.data());
    auto gq = q.download();
    auto gs = s.download();
    // Another way to the same output must give the same bytes and scales (bit for bit: the scales' NaN
    // poison of a skipped expert too).
    auto expect_same = [&](const char* how, const uint8_t* blocks_in, bool tiled_order, Fp8ConvertGrid grid,
                           int sms = 0) {
      DeviceBuffer<uint8_t> q2(q.size());
      DeviceBuffer<float> s2(s.size());
      orchid::testing::poison(q2);
      orchid::testing::poison(s2);
      mxfp4_to_fp8_block(blocks_in, ds.get(), c.experts, c.n, c.k, rule, q2.get(), s2.get(),
                         c.experts > 1 ? doff.get() : nullptr, nullptr, tiled_order, grid, sms);
      ORCHID_TEST_CUDA(cudaDeviceSynchronize());
      const std::string t = std::string(c.name) + (pow2 ? " pow2 " : " amax/448 ") + how;
      EXPECT_TRUE(orchid::testing::check_exact((t + " bytes").c_str(), q2.download(), gq));
      std::vector<uint32_t> sa(gs.size()), sb(gs.size());
      const auto got = s2.download();
      std::memcpy(sa.data(), got.data(), got.size() * 4);
      std::memcpy(sb.data(), gs.data(), gs.size() * 4);
      EXPECT_TRUE(orchid::testing::check_exact((t + " scales").c_str(), sa, sb));
    };
    // The persistent grid (each CTA loading its next block while converting one).
    expect_same("persistent grid", db.get(), false, Fp8ConvertGrid::kPersistent);
    // ... on one SM's CTAs (the grid that would run beside a GEMM on the other SMs).
    expect_same("persistent grid on 1 SM", db.get(), false, Fp8ConvertGrid::kPersistent, 1);
    {  // the blocks repacked as at load: on the device as the host reference does it, then converted
      const std::vector<uint8_t> repacked = orchid::testing::mxfp4_in_tiled_order(blocks, c.k);
      DeviceBuffer<uint8_t> db_tiled(repacked.size());
      orchid::testing::poison(db_tiled);  // the padding blocks are written too
      mxfp4_to_tiled_order(db.get(), db_tiled.get(), int64_t(c.experts) * c.n, c.k, nullptr);
      ORCHID_TEST_CUDA(cudaDeviceSynchronize());
      EXPECT_TRUE(orchid::testing::check_exact((std::string(c.name) + " repacked on the device").c_str(),
                                               db_tiled.download(), repacked));
      expect_same("tiled order", db_tiled.get(), true, Fp8ConvertGrid::kOneCtaPerBlock);
      expect_same("tiled order, persistent grid", db_tiled.get(), true, Fp8ConvertGrid::kPersistent);
    }
    if (c.experts > 1) {  // skipped expert: still poisoned; compare the rest
      const size_t qe = size_t(c.n) * kpad, se = size_t(rb) * (kpad / 128);
      bool untouched = true;
      for (size_t i = qe; i < 2 * qe; ++i) untouched &= gq[i] == 0xff;
      for (size_t i = se; i < 2 * se; ++i) untouched &= std::isnan(gs[i]);
      EXPECT_TRUE(untouched) << "the expert without rows was converted";
      std::copy(wq.begin() + qe, wq.begin() + 2 * qe, gq.begin() + qe);
      std::copy(ws.begin() + se, ws.begin() + 2 * se, gs.begin() + se);
    }
    const std::string n = std::string(c.name) + (pow2 ? " pow2" : " amax/448");
    EXPECT_TRUE(orchid::testing::check_exact((n + " q").c_str(), gq, wq));
    std::vector<double> wsd(ws.begin(), ws.end());
    EXPECT_TRUE(orchid::testing::check_close((n + " scales").c_str(), gs, wsd, 0, 0, 0));
    // How lossy each rule is on MXFP4 data (information for docs/design.md).
    std::vector<float> deq(wf.size());
    orchid::ref::fp8_block_dequant(wq.data(), ws.data(), c.experts, c.n, c.k, deq.data());
    size_t inexact = 0;
    double num = 0, den = 0;
    for (size_t i = 0; i < wf.size(); ++i) {
      inexact += deq[i] != wf[i];
      num += double(deq[i] - wf[i]) * double(deq[i] - wf[i]);
      den += double(wf[i]) * double(wf[i]);
    }
    std::printf("[info] %s: %zu of %zu elements inexact (%.3f%%), rel_l2 %.3g\n", n.c_str(), inexact,
                wf.size(), 100.0 * double(inexact) / double(wf.size()), std::sqrt(num / den));
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, Mxfp4ToFp8Test,
                         ::testing::Values(BlockCase{"partial_blocks", 3, 320, 2880},
                                           BlockCase{"gate_up_20b_1expert", 1, 5760, 2880},
                                           BlockCase{"small", 2, 64, 96},
                                           // more blocks than a persistent grid has CTAs (each CTA walks
                                           // several, some of them the skipped expert's)
                                           BlockCase{"experts16_640x2880", 16, 640, 2880}),
                         [](const ::testing::TestParamInfo<BlockCase>& i) {
                           return std::string(i.param.name);
                         });

TEST(WeightConvert, Bf16ToFp8BlockBothRules) {
  ORCHID_REQUIRE_GPU_OR_SKIP();
  std::mt19937_64 rng(orchid::testing::named_seed("bf16_to_fp8"));
  const int E = 2, n = 300, k = 2888;
  auto w = orchid::testing::random_bf16(rng, size_t(E) * n * k, 0.02f);
  w[12345] = float_to_bf16(3.0f);  // an outlier in one block
  const auto wf = orchid::testing::bf16_to_floats(w);
  const int kpad = (k + 127) / 128 * 128, rb = (n + 127) / 128;
  DeviceBuffer<uint16_t> dw;
  dw.upload(w);
  for (auto rule : {Fp8ScaleRule::kAmaxOver448, Fp8ScaleRule::kPow2}) {
    DeviceBuffer<uint8_t> q(size_t(E) * n * kpad);
    DeviceBuffer<float> s(size_t(E) * rb * (kpad / 128));
    orchid::testing::poison(q);
    orchid::testing::poison(s);
    bf16_to_fp8_block(dw.get(), E, n, k, rule, q.get(), s.get(), nullptr);
    ORCHID_TEST_CUDA(cudaDeviceSynchronize());
    std::vector<uint8_t> wq(q.size());
    std::vector<float> ws(s.size());
    orchid::ref::fp8_block_quant(
        wf.data(), E, n, k,
        rule == Fp8ScaleRule::kPow2 ? orchid::ref::Fp8Rule::kPow2 : orchid::ref::Fp8Rule::kAmaxOver448,
        wq.data(), ws.data());
    EXPECT_TRUE(orchid::testing::check_exact("bf16->fp8 block q", q.download(), wq));
    std::vector<double> wsd(ws.begin(), ws.end());
    EXPECT_TRUE(orchid::testing::check_close("bf16->fp8 block scales", s.download(), wsd, 0, 0, 0));
  }
}

}  // namespace
}  // namespace orchid::kernels
