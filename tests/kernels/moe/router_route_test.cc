// The fused router + routing kernel (moe_router_route) against references:
//   - logits against fp64 dot products (split input: the hi rows' and the lo rows' separately, no bias; else
//     with the bias);
//   - top-k, weights and the permutation exactly moe_route's on the kernel's own logits (also with an expert
//     range, as expert parallelism routes);
//   - a second launch on other inputs, then the first inputs again: the same bits as the first launch (the
//     tickets are left zero, whichever CTA finishes last);
// at 1-512 tokens (one token group and many, a partial last group, 1024 items), 20 / 32 / 128 experts, k 1-8,
// gpt-oss's hidden size and small ones. Then moe_forward with the kernel against the router GEMM + moe_route
// path (ORCHID_ROUTER_ROUTE is read once, so the test calls the kernel's own entry for the A side).
#include "kernels/moe/router_route.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>

#include "kernel_reference.h"
#include "kernel_test_util.h"
#include "kernels/moe/routing.h"
#include "kernels/norm/rmsnorm.h"

namespace orchid::kernels {
namespace {

using orchid::testing::DeviceBuffer;

struct Case {
  const char* name;
  int tokens, hidden, experts, top_k;
  bool split;
  MoeExpertRange range = {};
  bool norm = false;  // with the input norm (RouterRouteArgs::residual)
};

class RouterRouteTest : public ::testing::TestWithParam<Case> {};

struct Outputs {
  std::vector<float> logits, w;
  std::vector<int> idx, off, rt, re, sr, act, nact;
};

TEST_P(RouterRouteTest, MatchesReferenceAndMoeRoute) {
  ORCHID_REQUIRE_GPU_OR_SKIP();
  const Case c = GetParam();
  ASSERT_TRUE(router_route_fits(c.tokens, c.hidden, c.experts, c.top_k, c.norm));
  const int T = c.tokens, H = c.hidden, E = c.experts, K = c.top_k, items = T * K;
  const int rows = c.split ? 2 * T : T;
  std::mt19937_64 rng(orchid::testing::named_seed(c.name));
  std::normal_distribution<float> nd(0.0f, 1.0f);
  // The input: fp32 activations as hi + lo bf16 rows (split), or bf16 rows. With the norm, a residual and a
  // delta instead (x then holds what the norm kernel makes of them, computed below).
  auto make_x = [&](std::vector<uint16_t>& x, std::vector<float>& xf) {
    x.assign(size_t(rows) * H, 0);
    xf.assign(size_t(rows) * H, 0.0f);
    for (size_t i = 0; i < size_t(T) * H; ++i) {
      const float v = 2.0f * nd(rng);
      const uint16_t hi = orchid::float_to_bf16(v);
      x[i] = hi;
      xf[i] = orchid::bf16_to_float(hi);
      if (c.split) {
        const uint16_t lo = orchid::float_to_bf16(v - xf[i]);
        x[size_t(T) * H + i] = lo;
        xf[size_t(T) * H + i] = orchid::bf16_to_float(lo);
      }
    }
  };
  std::vector<uint16_t> x1, x2;
  std::vector<float> x1f, x2f;
  make_x(x1, x1f);
  make_x(x2, x2f);
  std::vector<float> res1(size_t(T) * H), res2(size_t(T) * H), gamma(static_cast<size_t>(H));
  for (auto& v : res1) v = 3.0f * nd(rng);
  for (auto& v : res2) v = 3.0f * nd(rng);
  for (auto& v : gamma) v = 1.0f + 0.2f * nd(rng);
  const auto delta = orchid::testing::random_bf16(rng, size_t(T) * H, 1.0f);
  DeviceBuffer<float> d_res, d_gamma;
  DeviceBuffer<uint16_t> d_delta, d_out(size_t(T) * H);
  d_gamma.upload(gamma);
  d_delta.upload(delta);
  const float eps = 1e-5f;
  auto* delta_p = reinterpret_cast<const __nv_bfloat16*>(d_delta.get());
  // The norm kernel's residual and rows for a residual: what the fused kernel must reproduce bit for bit.
  auto norm_reference = [&](const std::vector<float>& res, std::vector<float>& res_out,
                            std::vector<uint16_t>& x, std::vector<float>& xf) {
    DeviceBuffer<float> r;
    DeviceBuffer<uint16_t> h(size_t(rows) * H);
    r.upload(res);
    auto* hp = reinterpret_cast<__nv_bfloat16*>(h.get());
    if (c.split)
      norm::rmsnorm_residual_split(r.get(), delta_p, d_gamma.get(), hp, hp + size_t(T) * H, T, H, eps,
                                   nullptr);
    else
      norm::rmsnorm_residual(r.get(), delta_p, d_gamma.get(), hp, T, H, eps, nullptr);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    res_out = r.download();
    x = h.download();
    xf = orchid::testing::bf16_to_floats(x);
  };
  std::vector<float> res1_ref, res2_ref;
  if (c.norm) {
    norm_reference(res1, res1_ref, x1, x1f);
    norm_reference(res2, res2_ref, x2, x2f);
  }
  std::vector<float> bias(static_cast<size_t>(E));
  for (auto& v : bias) v = 0.5f * nd(rng);
  const auto wr = orchid::testing::random_bf16(rng, size_t(E) * H, 0.05f);

  DeviceBuffer<uint16_t> d_x, d_wr;
  DeviceBuffer<float> d_bias, d_logits(size_t(rows) * E), d_w(items);
  DeviceBuffer<int> d_idx(items), off(E + 2), rt(items), re(items), sr(items), act(E), nact(1);
  DeviceBuffer<uint8_t> scratch(router_route_scratch_bytes(T, E));
  orchid::testing::poison(scratch);
  router_route_scratch_init(scratch.get(), nullptr);
  d_wr.upload(wr);
  d_bias.upload(bias);
  RouterRouteArgs a;
  a.split = c.split;
  a.router_w = reinterpret_cast<const __nv_bfloat16*>(d_wr.get());
  a.router_b = d_bias.get();
  a.logits = d_logits.get();
  a.topk_idx = d_idx.get();
  a.topk_w = d_w.get();
  a.routing = MoeRouting{off.get(), rt.get(), re.get(), sr.get(), act.get(), nact.get()};
  a.range = c.range;
  a.scratch = scratch.get();
  a.num_tokens = T;
  a.hidden = H;
  a.num_experts = E;
  a.top_k = K;
  auto run = [&](const std::vector<uint16_t>& x, const std::vector<float>& res) {
    if (c.norm) {
      d_res.upload(res);
      orchid::testing::poison(d_out);
      a.residual = d_res.get();
      a.delta = delta_p;
      a.gamma = d_gamma.get();
      a.eps = eps;
      a.out = reinterpret_cast<__nv_bfloat16*>(d_out.get());
    } else {
      d_x.upload(x);
      a.x = reinterpret_cast<const __nv_bfloat16*>(d_x.get());
    }
    for (auto* b : {&d_idx, &off, &rt, &re, &sr, &act, &nact}) orchid::testing::poison(*b);
    orchid::testing::poison(d_logits);
    orchid::testing::poison(d_w);
    moe_router_route(a, nullptr);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    return Outputs{d_logits.download(), d_w.download(), d_idx.download(), off.download(), rt.download(),
                   re.download(),       sr.download(),  act.download(),   nact.download()};
  };
  const int keys = (c.range.count > 0 ? c.range.count : E) + (c.range.count > 0 && c.range.count < E ? 1 : 0);
  auto head = [](std::vector<int> v, size_t count) {
    v.resize(count);
    return v;
  };
  const std::string n = c.name;
  const auto wrf = orchid::testing::bf16_to_floats(wr);

  for (int round = 0; round < 2; ++round) {
    const std::vector<float>& xf = round == 0 ? x1f : x2f;
    const Outputs o = run(round == 0 ? x1 : x2, round == 0 ? res1 : res2);
    const std::string r = n + (round == 0 ? "" : " (second inputs)");
    if (c.norm) {  // the norm kernel's bits: the residual and the experts' rows
      EXPECT_TRUE(orchid::testing::check_exact((r + " residual").c_str(), d_res.download(),
                                               round == 0 ? res1_ref : res2_ref));
      const std::vector<uint16_t>& x = round == 0 ? x1 : x2;
      EXPECT_TRUE(
          orchid::testing::check_exact((r + " out").c_str(), d_out.download(),
                                       std::vector<uint16_t>(x.begin(), x.begin() + ptrdiff_t(T) * H)));
    }
    // The logits: fp64 dot products of each row (no bias on the split rows).
    std::vector<double> ref(size_t(rows) * E);
    orchid::ref::gemm(rows, E, H, xf.data(), H, wrf.data(), c.split ? nullptr : bias.data(), ref.data());
    double rms = 0;
    for (size_t i = 0; i < size_t(T) * E; ++i) rms += ref[i] * ref[i];
    rms = std::sqrt(rms / double(size_t(T) * E));
    EXPECT_TRUE(orchid::testing::check_close((r + " logits").c_str(), o.logits, ref, 2e-5 * rms, 1e-5, 1e-5));

    // Routing: moe_route's on the kernel's own logits, bit for bit.
    DeviceBuffer<float> d_l2, d_w2(items);
    DeviceBuffer<int> d_idx2(items), off2(E + 2), rt2(items), re2(items), sr2(items), act2(E), nact2(1);
    DeviceBuffer<uint8_t> pscratch(moe_permute_scratch_bytes(T, E, K));
    d_l2.upload(o.logits);
    for (auto* b : {&d_idx2, &off2, &rt2, &re2, &sr2, &act2, &nact2}) orchid::testing::poison(*b);
    moe_route(d_l2.get(), T, E, K, d_idx2.get(), d_w2.get(),
              MoeRouting{off2.get(), rt2.get(), re2.get(), sr2.get(), act2.get(), nact2.get()},
              pscratch.get(), nullptr, c.split ? d_l2.get() + size_t(T) * E : nullptr,
              c.split ? d_bias.get() : nullptr, c.range);
    ORCHID_TEST_CUDA(cudaDeviceSynchronize());
    EXPECT_TRUE(orchid::testing::check_exact((r + " idx").c_str(), o.idx, d_idx2.download()));
    EXPECT_TRUE(orchid::testing::check_exact((r + " weights").c_str(), o.w, d_w2.download()));
    EXPECT_TRUE(orchid::testing::check_exact((r + " offsets").c_str(), head(o.off, size_t(keys) + 1),
                                             head(off2.download(), size_t(keys) + 1)));
    EXPECT_TRUE(orchid::testing::check_exact((r + " row_token").c_str(), o.rt, rt2.download()));
    EXPECT_TRUE(orchid::testing::check_exact((r + " row_expert").c_str(), o.re, re2.download()));
    EXPECT_TRUE(orchid::testing::check_exact((r + " slot_row").c_str(), o.sr, sr2.download()));
    EXPECT_TRUE(orchid::testing::check_exact((r + " active").c_str(), o.act, act2.download()));
    EXPECT_EQ(o.nact[0], nact2.download()[0]) << r;
  }
  // The first inputs again: the first launch's bits (tickets reset, sums in a fixed order).
  const Outputs first = run(x1, res1), again = run(x1, res1);
  EXPECT_TRUE(orchid::testing::check_exact((n + " logits, repeated").c_str(), again.logits, first.logits));
  EXPECT_TRUE(orchid::testing::check_exact((n + " row_token, repeated").c_str(), again.rt, first.rt));
  EXPECT_TRUE(orchid::testing::check_exact((n + " weights, repeated").c_str(), again.w, first.w));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, RouterRouteTest,
    ::testing::Values(
        Case{"t1_h2880_e32_split", 1, 2880, 32, 4, true}, Case{"t3_h2880_e32_split", 3, 2880, 32, 4, true},
        Case{"t16_h2880_e32_split", 16, 2880, 32, 4, true},
        Case{"t37_h2880_e32_split", 37, 2880, 32, 4, true},
        Case{"t64_h2880_e32_bf16", 64, 2880, 32, 4, false},
        Case{"t255_h2880_e32_split", 255, 2880, 32, 4, true},
        Case{"t256_h2880_e32_split", 256, 2880, 32, 4, true},
        Case{"t256_h2880_e128_split", 256, 2880, 128, 4, true},
        Case{"t64_h2880_e128_k8", 64, 2880, 128, 8, true}, Case{"t512_h2880_e32_k2", 512, 2880, 32, 2, true},
        Case{"t7_h256_e20_k3", 7, 256, 20, 3, false}, Case{"t100_h128_e32_k1", 100, 128, 32, 1, true},
        Case{"t300_h8192_e8_k3", 300, 8192, 8, 3, false},
        Case{"t64_h2880_e32_ep4_rank1", 64, 2880, 32, 4, true, MoeExpertRange{8, 8}},
        Case{"t256_h2880_e128_ep8_rank7", 256, 2880, 128, 4, true, MoeExpertRange{112, 16}},
        // With the block's input norm (clusters of 8 CTAs, the rows exchanged in distributed shared memory).
        Case{"norm_t3_h2880_e32_split", 3, 2880, 32, 4, true, {}, true},
        Case{"norm_t16_h2880_e32_split", 16, 2880, 32, 4, true, {}, true},
        Case{"norm_t37_h2880_e32_split", 37, 2880, 32, 4, true, {}, true},
        Case{"norm_t64_h2880_e32_bf16", 64, 2880, 32, 4, false, {}, true},
        Case{"norm_t256_h2880_e32_split", 256, 2880, 32, 4, true, {}, true},
        Case{"norm_t7_h256_e20_k3", 7, 256, 20, 3, false, {}, true},
        Case{"norm_t100_h4096_e32_k1_ep4_rank1", 100, 4096, 32, 1, true, MoeExpertRange{8, 8}, true}),
    [](const ::testing::TestParamInfo<Case>& i) { return std::string(i.param.name); });

TEST(RouterRoute, RefusesWhatItDoesNotFit) {
  EXPECT_TRUE(router_route_fits(256, 2880, 32, 4));
  EXPECT_TRUE(router_route_fits(256, 2880, 128, 4));
  EXPECT_FALSE(router_route_fits(257, 2880, 32, 4));  // 1028 items: more than the block permutes
  EXPECT_FALSE(router_route_fits(8, 2880, 256, 4));   // more experts than a slice stages
  EXPECT_FALSE(router_route_fits(8, 2888, 32, 4));    // not whole k16 steps
  EXPECT_FALSE(router_route_fits(8, 16 * 16 * 33, 32, 4));
  EXPECT_FALSE(router_route_fits(0, 2880, 32, 4));
  EXPECT_FALSE(router_route_fits(8, 2880, 4, 8));  // k above the experts
  EXPECT_TRUE(router_route_fits(256, 2880, 32, 4, true));
  EXPECT_TRUE(router_route_fits(8, 4096, 32, 4, true));
  EXPECT_FALSE(router_route_fits(8, 4096 + 16, 32, 4, true));  // a row needs more than 128 norm threads
  EXPECT_TRUE(router_route_fits(8, 4096 + 16, 32, 4, false));
}

}  // namespace
}  // namespace orchid::kernels
