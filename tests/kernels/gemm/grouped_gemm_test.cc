// CUTLASS grouped GEMMs (FP8 blockwise, BF16) in the contiguous expert layout vs an fp64 CPU reference on
// the same (quantized) operands: empty groups, single-row groups, odd and >128-row groups, a partial last N
// tile (n = 2880), and the gpt-oss shapes.
#include "kernels/gemm/grouped_gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <random>

#include "kernel_reference.h"
#include "kernel_test_util.h"

namespace orchid::kernels {
namespace {

using orchid::testing::DeviceBuffer;
using orchid::testing::rms_of;

struct Case {
  const char* name;
  int n, k;
  std::vector<int> sizes;  // rows per group
};

std::vector<int> offsets_of(const std::vector<int>& sizes) {
  std::vector<int> off(sizes.size() + 1, 0);
  for (size_t i = 0; i < sizes.size(); ++i) off[i + 1] = off[i] + sizes[i];
  return off;
}

// Reference: per group, y = a[rows] · b[g]^T over float operands.
std::vector<double> reference(const std::vector<int>& off, int n, int k, const std::vector<float>& a,
                              const std::vector<float>& b) {
  const int E = int(off.size()) - 1;
  std::vector<double> y(static_cast<size_t>(off[E]) * n);
  for (int g = 0; g < E; ++g) {
    const int m = off[g + 1] - off[g];
    if (m == 0) continue;
    orchid::ref::gemm(m, n, k, a.data() + size_t(off[g]) * k, k, b.data() + size_t(g) * n * k, nullptr,
                      y.data() + size_t(off[g]) * n);
  }
  return y;
}

std::vector<float> download_bf16(const DeviceBuffer<uint16_t>& d) {
  return orchid::testing::bf16_to_floats(d.download());
}

void run_fp8(const Case& c, Fp8GroupedConfig config) {
  const std::string name = std::string(c.name) + " " + fp8_grouped_config_name(config);
  std::mt19937_64 rng(orchid::testing::named_seed(name.c_str()));
  const int E = int(c.sizes.size()), n = c.n, k = c.k;
  ASSERT_EQ(k % 128, 0);
  const auto off = offsets_of(c.sizes);
  const int M = off[E];
  std::normal_distribution<float> nd(0.0f, 1.0f);
  // A: per-row 1x128 quantization (the activation rule); B: 128x128 blocks.
  std::vector<float> af(size_t(M) * k), bf(size_t(E) * n * k);
  for (auto& v : af) v = nd(rng);
  for (auto& v : bf) v = nd(rng) / std::sqrt(float(k));
  std::vector<uint8_t> aq(size_t(M) * k), bq(size_t(E) * n * k);
  std::vector<float> as(size_t(M) * (k / 128)), bs(size_t(E) * ((n + 127) / 128) * (k / 128));
  for (int r = 0; r < M; ++r)
    orchid::ref::quant_fp8_row(&af[size_t(r) * k], k, &aq[size_t(r) * k], &as[size_t(r) * (k / 128)]);
  orchid::ref::fp8_block_quant(bf.data(), E, n, k, orchid::ref::Fp8Rule::kAmaxOver448, bq.data(), bs.data());
  // The reference sees exactly the quantized operands.
  std::vector<float> adq(af.size()), bdq(bf.size());
  for (int r = 0; r < M; ++r)
    for (int j = 0; j < k; ++j)
      adq[size_t(r) * k + j] = fp8e4m3_to_float(aq[size_t(r) * k + j]) * as[size_t(r) * (k / 128) + j / 128];
  orchid::ref::fp8_block_dequant(bq.data(), bs.data(), E, n, k, bdq.data());
  const auto ref = reference(off, n, k, adq, bdq);

  DeviceBuffer<uint8_t> da, db;
  DeviceBuffer<float> das, dbs;
  DeviceBuffer<int> doff;
  da.upload(aq);
  db.upload(bq);
  das.upload(as);
  dbs.upload(bs);
  doff.upload(off);
  DeviceBuffer<uint16_t> dd(size_t(std::max(M, 1)) * n);
  orchid::testing::poison(dd);
  DeviceBuffer<uint8_t> ws(grouped_gemm_fp8_workspace_bytes(E));
  GroupedGemmArgs g;
  g.num_groups = E;
  g.n = n;
  g.k = k;
  g.offsets = doff.get();
  g.a = da.get();
  g.b = db.get();
  g.d = dd.get();
  g.a_scale = das.get();
  g.b_scale = dbs.get();
  g.workspace = ws.get();
  g.workspace_bytes = ws.size();
  grouped_gemm_fp8_blockwise(g, nullptr, config);
  ORCHID_TEST_CUDA(cudaDeviceSynchronize());
  auto got = download_bf16(dd);
  got.resize(size_t(M) * n);
  const double rms = rms_of(ref);
  EXPECT_TRUE(orchid::testing::check_close(name.c_str(), got, ref, 2e-3 * rms, 8e-3, 5e-3));
  // The persistent grid on 7 SMs (leaving the rest to another stream's kernel): the same tiles, so the
  // same bits.
  orchid::testing::poison(dd);
  g.max_sms = 7;
  grouped_gemm_fp8_blockwise(g, nullptr, config);
  ORCHID_TEST_CUDA(cudaDeviceSynchronize());
  auto few = download_bf16(dd);
  few.resize(size_t(M) * n);
  EXPECT_TRUE(orchid::testing::check_exact((name + " on 7 SMs").c_str(), few, got));
}

void run_bf16(const Case& c) {
  std::mt19937_64 rng(orchid::testing::named_seed(c.name));
  const int E = int(c.sizes.size()), n = c.n, k = c.k;
  const auto off = offsets_of(c.sizes);
  const int M = off[E];
  auto a = orchid::testing::random_bf16(rng, size_t(M) * k, 1.0f);
  auto b = orchid::testing::random_bf16(rng, size_t(E) * n * k, 1.0f / std::sqrt(float(k)));
  const auto ref =
      reference(off, n, k, orchid::testing::bf16_to_floats(a), orchid::testing::bf16_to_floats(b));

  DeviceBuffer<uint16_t> da, db;
  DeviceBuffer<int> doff;
  da.upload(a);
  db.upload(b);
  doff.upload(off);
  DeviceBuffer<uint16_t> dd(size_t(std::max(M, 1)) * n);
  orchid::testing::poison(dd);
  DeviceBuffer<uint8_t> ws(grouped_gemm_bf16_workspace_bytes(E));
  GroupedGemmArgs g;
  g.num_groups = E;
  g.n = n;
  g.k = k;
  g.offsets = doff.get();
  g.a = da.get();
  g.b = db.get();
  g.d = dd.get();
  g.workspace = ws.get();
  g.workspace_bytes = ws.size();
  grouped_gemm_bf16(g, nullptr);
  ORCHID_TEST_CUDA(cudaDeviceSynchronize());
  auto got = download_bf16(dd);
  got.resize(size_t(M) * n);
  const double rms = rms_of(ref);
  EXPECT_TRUE(orchid::testing::check_close(c.name, got, ref, 2e-3 * rms, 8e-3, 5e-3));
}

std::vector<int> random_split(uint64_t seed, int experts, int rows) {
  std::mt19937_64 rng(seed);
  std::vector<int> s(experts, 0);
  std::uniform_int_distribution<int> pick(0, experts - 1);
  for (int i = 0; i < rows; ++i) s[pick(rng)]++;
  return s;
}

const std::vector<Case>& cases() {
  static const std::vector<Case> c = {
      {"small_mixed", 256, 384, {0, 1, 3, 130, 0, 257, 64, 0}},
      {"one_group", 384, 512, {0, 0, 300, 0}},
      {"partial_n_tile", 2880, 2944, {5, 0, 129, 1}},
      {"single_row", 5760, 2944, {0, 0, 0, 1, 0, 0, 0, 0}},
      {"gate_up_20b_t33", 5760, 2944, random_split(33, 32, 33 * 4)},
      {"down_20b_t257", 2880, 2944, random_split(257, 32, 257 * 4)},
  };
  return c;
}

class GroupedGemmTest : public ::testing::TestWithParam<Case> {};

TEST_P(GroupedGemmTest, Fp8BlockwiseCooperativeMatchesReference) {
  ORCHID_REQUIRE_GPU_OR_SKIP();
  run_fp8(GetParam(), Fp8GroupedConfig::kCooperative128x128);
}

TEST_P(GroupedGemmTest, Fp8BlockwisePingpongMatchesReference) {
  ORCHID_REQUIRE_GPU_OR_SKIP();
  run_fp8(GetParam(), Fp8GroupedConfig::kPingpong64x128);
}

TEST_P(GroupedGemmTest, Bf16MatchesReference) {
  ORCHID_REQUIRE_GPU_OR_SKIP();
  run_bf16(GetParam());
}

INSTANTIATE_TEST_SUITE_P(Groups, GroupedGemmTest, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& i) { return std::string(i.param.name); });

// Every finite e4m3 code through the tensor cores: row i of A holds code i in column 0 (scale 1), B picks
// column 0 with 1.0, so D[i, 0] must be the exact value of code i (4 significant bits: exact in bf16).
TEST(GroupedGemmFp8, DecodesEveryFiniteCode) {
  ORCHID_REQUIRE_GPU_OR_SKIP();
  const int M = 256, n = 16, k = 128;
  std::vector<uint8_t> a(size_t(M) * k, 0), b(size_t(n) * k, 0);
  std::vector<double> want(M);
  for (int i = 0; i < M; ++i) {
    const bool nan = (i & 0x7f) == 0x7f;
    a[size_t(i) * k] = nan ? 0 : uint8_t(i);
    want[i] = nan ? 0.0 : double(fp8e4m3_to_float(uint8_t(i)));
  }
  b[0] = float_to_fp8e4m3(1.0f);
  std::vector<float> as(M, 1.0f), bs(1, 1.0f);
  std::vector<int> off = {0, M};
  DeviceBuffer<uint8_t> da, db;
  DeviceBuffer<float> das, dbs;
  DeviceBuffer<int> doff;
  da.upload(a);
  db.upload(b);
  das.upload(as);
  dbs.upload(bs);
  doff.upload(off);
  for (auto config : {Fp8GroupedConfig::kCooperative128x128, Fp8GroupedConfig::kPingpong64x128}) {
    DeviceBuffer<uint16_t> dd(size_t(M) * n);
    orchid::testing::poison(dd);
    DeviceBuffer<uint8_t> ws(grouped_gemm_fp8_workspace_bytes(1));
    GroupedGemmArgs g;
    g.num_groups = 1;
    g.n = n;
    g.k = k;
    g.offsets = doff.get();
    g.a = da.get();
    g.b = db.get();
    g.d = dd.get();
    g.a_scale = das.get();
    g.b_scale = dbs.get();
    g.workspace = ws.get();
    g.workspace_bytes = ws.size();
    grouped_gemm_fp8_blockwise(g, nullptr, config);
    ORCHID_TEST_CUDA(cudaDeviceSynchronize());
    const auto d = download_bf16(dd);
    std::vector<float> col0(M);
    std::vector<double> rest_ref(size_t(M) * (n - 1), 0.0);
    std::vector<float> rest(size_t(M) * (n - 1));
    for (int i = 0; i < M; ++i) {
      col0[i] = d[size_t(i) * n];
      for (int j = 1; j < n; ++j) rest[size_t(i) * (n - 1) + j - 1] = d[size_t(i) * n + j];
    }
    const std::string name = std::string("e4m3 codes via ") + fp8_grouped_config_name(config);
    EXPECT_TRUE(orchid::testing::check_close(name.c_str(), col0, want, 0, 0, 0));
    EXPECT_TRUE(
        orchid::testing::check_close((name + " (other columns zero)").c_str(), rest, rest_ref, 0, 0, 0));
  }
}

}  // namespace
}  // namespace orchid::kernels
