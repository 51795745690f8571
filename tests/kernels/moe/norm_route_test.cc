// The fused post-attention kernel (moe_norm_route) against the kernels it replaces and references:
//   - residual and out bit for bit norm::rmsnorm_residual's;
//   - logits against fp64 dot products of the norm output (fp32 for precise routing, its bf16 rounding
//     otherwise);
//   - top-k, weights and the permutation exactly moe_route's on the kernel's own logits (also with an expert
//     range, as expert parallelism routes);
// at 1-8 tokens, 32 and 128 experts (one cluster of 4 / 8 blocks), gpt-oss's hidden size and a small one.
// Then moe_forward with in_norm against the norm kernel followed by moe_forward: the same experts wherever
// the k-th and (k+1)-th logits are decided, the same output up to the router's rounding, and above the fused
// kernel's token limit the same bits.
#include "kernels/moe/norm_route.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>

#include "bf16_moe_layer.h"
#include "kernel_reference.h"
#include "kernel_test_util.h"
#include "kernels/moe/moe_layer.h"
#include "kernels/norm/rmsnorm.h"

namespace orchid::kernels {
namespace {

using orchid::testing::DeviceBuffer;

struct Case {
  const char* name;
  int tokens, hidden, experts, top_k;
  bool precise;
  MoeExpertRange range = {};
};

class NormRouteTest : public ::testing::TestWithParam<Case> {};

TEST_P(NormRouteTest, MatchesTheKernelsItReplaces) {
  ORCHID_REQUIRE_GPU_OR_SKIP();
  const Case c = GetParam();
  ASSERT_TRUE(norm_route_fits(c.tokens, c.hidden, c.experts, c.top_k));
  const int T = c.tokens, H = c.hidden, E = c.experts, K = c.top_k, items = T * K;
  std::mt19937_64 rng(orchid::testing::named_seed(c.name));
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x0(size_t(T) * H), gamma(static_cast<size_t>(H)), bias(static_cast<size_t>(E));
  for (auto& v : x0) v = 3.0f * nd(rng);
  for (auto& v : gamma) v = 1.0f + 0.2f * nd(rng);
  for (auto& v : bias) v = 0.5f * nd(rng);
  const auto delta = orchid::testing::random_bf16(rng, size_t(T) * H, 1.0f);
  const auto wr = orchid::testing::random_bf16(rng, size_t(E) * H, 0.05f);

  DeviceBuffer<float> d_x, d_x_ref, d_gamma, d_bias, d_logits(size_t(T) * E), d_w(items);
  DeviceBuffer<uint16_t> d_delta, d_wr, d_h(size_t(T) * H), d_h_ref(size_t(T) * H);
  DeviceBuffer<int> d_idx(items), off(E + 2), rt(items), re(items), sr(items), act(E), nact(1);
  d_x.upload(x0);
  d_x_ref.upload(x0);
  d_gamma.upload(gamma);
  d_bias.upload(bias);
  d_delta.upload(delta);
  d_wr.upload(wr);
  for (auto* b : {&d_idx, &off, &rt, &re, &sr, &act, &nact}) orchid::testing::poison(*b);
  orchid::testing::poison(d_h);
  orchid::testing::poison(d_logits);
  orchid::testing::poison(d_w);
  const float eps = 1e-5f;
  auto* delta_p = reinterpret_cast<const __nv_bfloat16*>(d_delta.get());
  norm::rmsnorm_residual(d_x_ref.get(), delta_p, d_gamma.get(),
                         reinterpret_cast<__nv_bfloat16*>(d_h_ref.get()), T, H, eps, nullptr);

  NormRouteArgs a;
  a.residual = d_x.get();
  a.delta = delta_p;
  a.gamma = d_gamma.get();
  a.eps = eps;
  a.out = reinterpret_cast<__nv_bfloat16*>(d_h.get());
  a.router_w = reinterpret_cast<const __nv_bfloat16*>(d_wr.get());
  a.router_b = d_bias.get();
  a.precise = c.precise;
  a.logits = d_logits.get();
  a.topk_idx = d_idx.get();
  a.topk_w = d_w.get();
  a.routing = MoeRouting{off.get(), rt.get(), re.get(), sr.get(), act.get(), nact.get()};
  a.range = c.range;
  a.num_tokens = T;
  a.hidden = H;
  a.num_experts = E;
  a.top_k = K;
  moe_norm_route(a, nullptr);
  ORCHID_TEST_CUDA(cudaDeviceSynchronize());
  const std::string n = c.name;

  // The norm: the norm kernel's bits.
  const auto x = d_x.download();
  EXPECT_TRUE(orchid::testing::check_exact((n + " residual").c_str(), x, d_x_ref.download()));
  EXPECT_TRUE(orchid::testing::check_exact((n + " out").c_str(), d_h.download(), d_h_ref.download()));

  // The logits: fp64 dot products of what the router reads.
  std::vector<float> y(size_t(T) * H);
  const auto h = orchid::testing::bf16_to_floats(d_h.download());
  for (int t = 0; t < T; ++t) {
    double ss = 0;
    for (int i = 0; i < H; ++i) ss += double(x[size_t(t) * H + i]) * double(x[size_t(t) * H + i]);
    const double r = 1.0 / std::sqrt(ss / H + double(eps));
    for (int i = 0; i < H; ++i)
      y[size_t(t) * H + i] = c.precise ? float(double(x[size_t(t) * H + i]) * r * double(gamma[size_t(i)]))
                                       : h[size_t(t) * H + i];
  }
  std::vector<double> ref(size_t(T) * E);
  const auto wrf = orchid::testing::bf16_to_floats(wr);
  orchid::ref::gemm(T, E, H, y.data(), H, wrf.data(), bias.data(), ref.data());
  double rms = 0;
  for (double v : ref) rms += v * v;
  rms = std::sqrt(rms / double(ref.size()));
  const auto logits = d_logits.download();
  EXPECT_TRUE(orchid::testing::check_close((n + " logits").c_str(), logits, ref, 2e-5 * rms, 1e-5, 1e-5));

  // Routing: moe_route's on the same logits, bit for bit.
  DeviceBuffer<float> d_l2, d_w2(items);
  DeviceBuffer<int> d_idx2(items), off2(E + 2), rt2(items), re2(items), sr2(items), act2(E), nact2(1);
  DeviceBuffer<uint8_t> scratch(moe_permute_scratch_bytes(T, E, K));
  d_l2.upload(logits);
  for (auto* b : {&d_idx2, &off2, &rt2, &re2, &sr2, &act2, &nact2}) orchid::testing::poison(*b);
  moe_route(d_l2.get(), T, E, K, d_idx2.get(), d_w2.get(),
            MoeRouting{off2.get(), rt2.get(), re2.get(), sr2.get(), act2.get(), nact2.get()}, scratch.get(),
            nullptr, nullptr, nullptr, c.range);
  ORCHID_TEST_CUDA(cudaDeviceSynchronize());
  const int keys = (c.range.count > 0 ? c.range.count : E) + (c.range.count > 0 && c.range.count < E ? 1 : 0);
  auto head = [](std::vector<int> v, size_t count) {
    v.resize(count);
    return v;
  };
  EXPECT_TRUE(orchid::testing::check_exact((n + " idx").c_str(), d_idx.download(), d_idx2.download()));
  EXPECT_TRUE(orchid::testing::check_exact((n + " weights").c_str(), d_w.download(), d_w2.download()));
  EXPECT_TRUE(orchid::testing::check_exact((n + " offsets").c_str(), head(off.download(), size_t(keys) + 1),
                                           head(off2.download(), size_t(keys) + 1)));
  EXPECT_TRUE(orchid::testing::check_exact((n + " row_token").c_str(), rt.download(), rt2.download()));
  EXPECT_TRUE(orchid::testing::check_exact((n + " row_expert").c_str(), re.download(), re2.download()));
  EXPECT_TRUE(orchid::testing::check_exact((n + " slot_row").c_str(), sr.download(), sr2.download()));
  EXPECT_TRUE(orchid::testing::check_exact((n + " active").c_str(), act.download(), act2.download()));
  EXPECT_EQ(nact.download()[0], nact2.download()[0]) << n;
}

INSTANTIATE_TEST_SUITE_P(
    Cases, NormRouteTest,
    ::testing::Values(
        Case{"t1_h2880_e32_precise", 1, 2880, 32, 4, true}, Case{"t1_h2880_e32_bf16", 1, 2880, 32, 4, false},
        Case{"t3_h2880_e128_precise", 3, 2880, 128, 4, true},
        Case{"t8_h2880_e32_precise", 8, 2880, 32, 4, true},
        Case{"t8_h2880_e128_bf16", 8, 2880, 128, 4, false}, Case{"t5_h128_e32_k4", 5, 128, 32, 4, true},
        Case{"t7_h256_e20_k3", 7, 256, 20, 3, false}, Case{"t8_h2880_e128_k8", 8, 2880, 128, 8, true},
        Case{"t4_h2880_e32_ep4_rank1", 4, 2880, 32, 4, true, MoeExpertRange{8, 8}},
        Case{"t8_h2880_e128_ep8_rank7", 8, 2880, 128, 4, true, MoeExpertRange{112, 16}}),
    [](const ::testing::TestParamInfo<Case>& i) { return std::string(i.param.name); });

TEST(NormRoute, RefusesWhatItDoesNotFit) {
  EXPECT_FALSE(norm_route_fits(kNormRouteMaxTokens + 1, 2880, 32, 4));
  EXPECT_FALSE(norm_route_fits(1, 2880, 256, 4));
  EXPECT_FALSE(norm_route_fits(1, 2884, 32, 4));
  EXPECT_FALSE(norm_route_fits(0, 2880, 32, 4));
  EXPECT_TRUE(norm_route_fits(kNormRouteMaxTokens, 2880, 128, 8));
  // Shared memory: (2 T + 1) rows of 3072 floats fit at 2 tokens, not at 8.
  EXPECT_TRUE(norm_route_fits(2, 3072, 128, 4));
  EXPECT_FALSE(norm_route_fits(kNormRouteMaxTokens, 3072, 128, 4));
}

// moe_forward with in_norm against the norm kernel and then moe_forward (BF16 experts, the split router of
// precise routing): where the fused kernel is taken (1-2 tokens) it routes on the fp32 norm output where the
// other path routes on hi + lo, so they agree on every decided token and their outputs on tokens routed alike
// differ by the routing weights' last bits; above (5, 12 tokens) in_norm runs the same kernels, so the bits
// are equal.
TEST(NormRoute, MoeForwardWithItsInputNorm) {
  ORCHID_REQUIRE_GPU_OR_SKIP();
  for (int T : {1, 2, 5, 12}) {
    std::mt19937_64 rng(orchid::testing::named_seed("moe_in_norm") + uint64_t(T));
    const Bf16MoeLayer layer(T, rng);
    const MoeConfig& cfg = layer.cfg;
    const int E = cfg.experts, K = cfg.top_k, H = cfg.hidden;
    const std::vector<float>& br = layer.router_b;
    auto delta = orchid::testing::random_bf16(rng, size_t(T) * H, 1.0f);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> x0(size_t(T) * H), gamma(static_cast<size_t>(H));
    for (auto& v : x0) v = nd(rng);
    for (auto& v : gamma) v = 1.0f + 0.1f * nd(rng);
    DeviceBuffer<uint16_t> d_delta, d_h_a(size_t(2) * T * H), d_h_b(size_t(2) * T * H);
    DeviceBuffer<float> d_gamma, d_x_a, d_x_b;
    d_delta.upload(delta);
    d_gamma.upload(gamma);
    d_x_a.upload(x0);
    d_x_b.upload(x0);
    const MoeLayerWeights lw = layer.weights();
    DenseGemm& router = *layer.router;
    void* ws = layer.ws.get();
    const MoeBuffers b = layer.buffers();
    const float eps = 1e-5f;
    auto* delta_p = reinterpret_cast<const __nv_bfloat16*>(d_delta.get());

    // A: the norm kernel, then the block.
    auto* h_a = reinterpret_cast<__nv_bfloat16*>(d_h_a.get());
    norm::rmsnorm_residual_split(d_x_a.get(), delta_p, d_gamma.get(), h_a, h_a + size_t(T) * H, T, H, eps,
                                 nullptr);
    moe_forward(cfg, lw, h_a, d_x_a.get(), T, router, ws, nullptr, true);
    ORCHID_TEST_CUDA(cudaDeviceSynchronize());
    const auto x_a = d_x_a.download();  // after the block
    std::vector<int> topk_a(size_t(T) * K);
    ORCHID_TEST_CUDA(cudaMemcpy(topk_a.data(), b.topk_idx, topk_a.size() * 4, cudaMemcpyDeviceToHost));
    std::vector<float> logits_a(size_t(2) * T * E);
    ORCHID_TEST_CUDA(cudaMemcpy(logits_a.data(), b.logits, logits_a.size() * 4, cudaMemcpyDeviceToHost));

    // B: the block with its input norm.
    MoeInputNorm in;
    in.residual = d_x_b.get();
    in.delta = delta_p;
    in.gamma = d_gamma.get();
    in.eps = eps;
    in.out = d_h_b.get();
    moe_forward(cfg, lw, d_h_b.get(), d_x_b.get(), T, router, ws, nullptr, true, MoeOutput::kAddToResidual,
                nullptr, &in);
    ORCHID_TEST_CUDA(cudaDeviceSynchronize());
    const auto x_b = d_x_b.download();
    std::vector<int> topk_b(size_t(T) * K);
    ORCHID_TEST_CUDA(cudaMemcpy(topk_b.data(), b.topk_idx, topk_b.size() * 4, cudaMemcpyDeviceToHost));
    const auto h_a_rows = d_h_a.download(), h_b_rows = d_h_b.download();
    EXPECT_TRUE(std::equal(h_a_rows.begin(), h_a_rows.begin() + ptrdiff_t(T) * H, h_b_rows.begin()))
        << "T=" << T << ": the experts' input differs from the norm kernel's";
    if (!moe_norm_route_taken(cfg, T)) {
      EXPECT_TRUE(orchid::testing::check_exact(
          ("in_norm above the fused kernel, T=" + std::to_string(T)).c_str(), x_b, x_a));
      continue;
    }
    int decided = 0, miss = 0, alike = 0;
    double err2 = 0, ref2 = 0;
    for (int t = 0; t < T; ++t) {
      std::vector<std::pair<float, int>> v;
      for (int e = 0; e < E; ++e)
        v.push_back({-((logits_a[size_t(t) * E + e] + logits_a[size_t(T + t) * E + e]) + br[size_t(e)]), e});
      std::sort(v.begin(), v.end());
      auto set_of = [&](const std::vector<int>& s) {
        std::vector<int> r(s.begin() + ptrdiff_t(t) * K, s.begin() + ptrdiff_t(t + 1) * K);
        std::sort(r.begin(), r.end());
        return r;
      };
      const bool dec = double(v[size_t(K)].first) - double(v[size_t(K - 1)].first) > 1e-4;
      decided += dec;
      miss += dec && set_of(topk_a) != set_of(topk_b);
      if (set_of(topk_a) == set_of(topk_b)) {
        ++alike;
        for (int i = 0; i < H; ++i) {
          const double d = double(x_b[size_t(t) * H + i]) - double(x_a[size_t(t) * H + i]);
          err2 += d * d;
          ref2 += double(x_a[size_t(t) * H + i]) * double(x_a[size_t(t) * H + i]);
        }
      }
    }
    const double rel = alike ? std::sqrt(err2 / ref2) : 0.0;
    std::printf(
        "    T=%d: %d of %d tokens decided, %d routed unlike; output on %d alike-routed tokens: rel L2 "
        "%.2e\n",
        T, decided, T, miss, alike, rel);
    EXPECT_EQ(miss, 0);
    EXPECT_GT(alike, 0);
    EXPECT_LT(rel, 1e-4);
  }
}

}  // namespace
}  // namespace orchid::kernels
