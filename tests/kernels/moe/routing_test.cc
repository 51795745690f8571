// Router top-k + softmax and the token permutation vs CPU references: ties (lower expert wins), E = 32 and
// 128, a single token (decode), odd token counts, experts with no tokens, skewed routing, several counting
// chunks (T*k > 1024), and moe_route's fused and general paths; logits split into hi, lo and bias (the split
// router).
#include "kernels/moe/routing.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "kernel_reference.h"
#include "kernel_test_util.h"

namespace orchid::kernels {
namespace {

using orchid::testing::DeviceBuffer;

struct TopkCase {
  const char* name;
  int tokens, experts, top_k;
  bool coarse;  // integer logits in [-3, 3]: many exact ties
};

class TopkSoftmaxTest : public ::testing::TestWithParam<TopkCase> {};

TEST_P(TopkSoftmaxTest, MatchesReference) {
  ORCHID_REQUIRE_GPU_OR_SKIP();
  const TopkCase c = GetParam();
  std::mt19937_64 rng(orchid::testing::named_seed(c.name));
  std::vector<float> logits(size_t(c.tokens) * c.experts);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  std::uniform_int_distribution<int> coarse(-3, 3);
  for (auto& v : logits) v = c.coarse ? float(coarse(rng)) : nd(rng);
  DeviceBuffer<float> dl, dw(size_t(c.tokens) * c.top_k);
  DeviceBuffer<int> di(size_t(c.tokens) * c.top_k);
  dl.upload(logits);
  orchid::testing::poison(di);
  orchid::testing::poison(dw);
  moe_topk_softmax(dl.get(), c.tokens, c.experts, c.top_k, di.get(), dw.get(), nullptr);
  ORCHID_TEST_CUDA(cudaDeviceSynchronize());
  std::vector<int> ri(size_t(c.tokens) * c.top_k);
  std::vector<float> rw(ri.size());
  orchid::ref::topk_softmax(logits.data(), c.tokens, c.experts, c.top_k, ri.data(), rw.data());
  EXPECT_TRUE(orchid::testing::check_exact((std::string(c.name) + " idx").c_str(), di.download(), ri));
  std::vector<double> rwd(rw.begin(), rw.end());
  EXPECT_TRUE(orchid::testing::check_close((std::string(c.name) + " weights").c_str(), dw.download(), rwd,
                                           1e-7, 1e-6, 1e-6));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, TopkSoftmaxTest,
    ::testing::Values(TopkCase{"decode_e32", 1, 32, 4, false}, TopkCase{"odd_e32", 37, 32, 4, false},
                      TopkCase{"ties_e32", 301, 32, 4, true}, TopkCase{"e128", 1000, 128, 4, false},
                      TopkCase{"ties_e128", 77, 128, 4, true}, TopkCase{"e256_k8", 9, 256, 8, false},
                      TopkCase{"e40_k1", 13, 40, 1, false}),
    [](const ::testing::TestParamInfo<TopkCase>& i) { return std::string(i.param.name); });

struct PermuteCase {
  const char* name;
  int tokens, experts, top_k;
  int hot;  // > 0: only this many experts get tokens (the rest stay empty)
};

class PermuteTest : public ::testing::TestWithParam<PermuteCase> {};

TEST_P(PermuteTest, MatchesReference) {
  ORCHID_REQUIRE_GPU_OR_SKIP();
  const PermuteCase c = GetParam();
  std::mt19937_64 rng(orchid::testing::named_seed(c.name));
  const int items = c.tokens * c.top_k;
  std::vector<int> idx(items);
  const int pool = c.hot > 0 ? c.hot : c.experts;
  for (int t = 0; t < c.tokens; ++t) {
    // k distinct experts per token, drawn from the first `pool` experts of a shuffled list.
    std::vector<int> perm(c.experts);
    for (int e = 0; e < c.experts; ++e) perm[e] = e;
    std::shuffle(perm.begin(), perm.begin() + pool, rng);
    for (int j = 0; j < c.top_k; ++j) idx[size_t(t) * c.top_k + j] = perm[j];
  }
  const auto ref = orchid::ref::permute(idx.data(), c.tokens, c.experts, c.top_k);

  DeviceBuffer<int> didx, off(c.experts + 1), rt(items), re(items), sr(items), act(c.experts), nact(1);
  DeviceBuffer<uint8_t> scratch(moe_permute_scratch_bytes(c.tokens, c.experts, c.top_k));
  didx.upload(idx);
  for (auto* b : {&off, &rt, &re, &sr, &act, &nact}) orchid::testing::poison(*b);
  MoeRouting r{off.get(), rt.get(), re.get(), sr.get(), act.get(), nact.get()};
  moe_permute(didx.get(), c.tokens, c.experts, c.top_k, r, scratch.get(), nullptr);
  ORCHID_TEST_CUDA(cudaDeviceSynchronize());

  const std::string n = c.name;
  EXPECT_TRUE(orchid::testing::check_exact((n + " offsets").c_str(), off.download(), ref.offsets));
  EXPECT_TRUE(orchid::testing::check_exact((n + " row_token").c_str(), rt.download(), ref.row_token));
  EXPECT_TRUE(orchid::testing::check_exact((n + " row_expert").c_str(), re.download(), ref.row_expert));
  EXPECT_TRUE(orchid::testing::check_exact((n + " slot_row").c_str(), sr.download(), ref.slot_row));
  std::vector<int> ref_active = ref.active;
  ref_active.resize(c.experts, -1);
  EXPECT_TRUE(orchid::testing::check_exact((n + " active").c_str(), act.download(), ref_active));
  EXPECT_EQ(nact.download()[0], int(ref.active.size()));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, PermuteTest,
    ::testing::Values(PermuteCase{"decode_t1_e32", 1, 32, 4, 0}, PermuteCase{"t7_e128", 7, 128, 4, 0},
                      PermuteCase{"t67_e32", 67, 32, 4, 0}, PermuteCase{"t256_e32", 256, 32, 4, 0},
                      PermuteCase{"t200_e128", 200, 128, 4, 0}, PermuteCase{"hot4_t300_e32", 300, 32, 4, 4},
                      PermuteCase{"chunks_t1537_e32", 1537, 32, 4, 0},
                      PermuteCase{"chunks_t5001_e128", 5001, 128, 4, 0},
                      PermuteCase{"skew_t2049_e128", 2049, 128, 4, 9}),
    [](const ::testing::TestParamInfo<PermuteCase>& i) { return std::string(i.param.name); });

struct RouteCase {
  const char* name;
  int tokens, experts, top_k;
};

class RouteTest : public ::testing::TestWithParam<RouteCase> {};

// moe_route: the fused single-CTA kernel (T*k <= moe_route_fused_max_items()) and the general path give the
// references' results.
TEST_P(RouteTest, FusedAndGeneralPathsMatchReference) {
  ORCHID_REQUIRE_GPU_OR_SKIP();
  const RouteCase c = GetParam();
  std::mt19937_64 rng(orchid::testing::named_seed(c.name));
  const int items = c.tokens * c.top_k;
  std::vector<float> logits(size_t(c.tokens) * c.experts);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  for (auto& v : logits) v = bf16_to_float(float_to_bf16(nd(rng)));  // on the bf16 grid: some exact ties
  std::vector<int> ri(items);
  std::vector<float> rw(items);
  orchid::ref::topk_softmax(logits.data(), c.tokens, c.experts, c.top_k, ri.data(), rw.data());
  const auto ref = orchid::ref::permute(ri.data(), c.tokens, c.experts, c.top_k);

  DeviceBuffer<float> dl, dw(items);
  DeviceBuffer<int> di(items), off(c.experts + 1), rt(items), re(items), sr(items), act(c.experts), nact(1);
  DeviceBuffer<uint8_t> scratch(moe_permute_scratch_bytes(c.tokens, c.experts, c.top_k));
  dl.upload(logits);
  for (auto* b : {&di, &off, &rt, &re, &sr, &act, &nact}) orchid::testing::poison(*b);
  orchid::testing::poison(dw);
  MoeRouting r{off.get(), rt.get(), re.get(), sr.get(), act.get(), nact.get()};
  moe_route(dl.get(), c.tokens, c.experts, c.top_k, di.get(), dw.get(), r, scratch.get(), nullptr);
  ORCHID_TEST_CUDA(cudaDeviceSynchronize());
  const std::string n =
      std::string(c.name) + (items <= moe_route_fused_max_items() ? " (fused)" : " (general)");
  EXPECT_TRUE(orchid::testing::check_exact((n + " idx").c_str(), di.download(), ri));
  EXPECT_TRUE(orchid::testing::check_close((n + " weights").c_str(), dw.download(),
                                           std::vector<double>(rw.begin(), rw.end()), 1e-7, 1e-6, 1e-6));
  EXPECT_TRUE(orchid::testing::check_exact((n + " offsets").c_str(), off.download(), ref.offsets));
  EXPECT_TRUE(orchid::testing::check_exact((n + " row_token").c_str(), rt.download(), ref.row_token));
  EXPECT_TRUE(orchid::testing::check_exact((n + " row_expert").c_str(), re.download(), ref.row_expert));
  EXPECT_TRUE(orchid::testing::check_exact((n + " slot_row").c_str(), sr.download(), ref.slot_row));
  std::vector<int> ref_active = ref.active;
  ref_active.resize(c.experts, -1);
  EXPECT_TRUE(orchid::testing::check_exact((n + " active").c_str(), act.download(), ref_active));
  EXPECT_EQ(nact.download()[0], int(ref.active.size()));
}

// The split router: logits given as hi and lo GEMM outputs without bias; the kernels must route exactly as
// the reference does on (hi + lo) + bias, on both paths.
TEST_P(RouteTest, SplitLogitsRouteLikeTheirSum) {
  ORCHID_REQUIRE_GPU_OR_SKIP();
  const RouteCase c = GetParam();
  std::mt19937_64 rng(orchid::testing::named_seed(c.name) + 1);
  const int items = c.tokens * c.top_k;
  const size_t n_logits = size_t(c.tokens) * c.experts;
  std::vector<float> hi(n_logits), lo(n_logits), bias(static_cast<size_t>(c.experts)), sum(n_logits);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  for (auto& v : hi) v = nd(rng);
  for (auto& v : lo) v = 1e-3f * nd(rng);
  for (auto& v : bias) v = 0.5f * nd(rng);
  for (size_t i = 0; i < n_logits; ++i) sum[i] = (hi[i] + lo[i]) + bias[i % size_t(c.experts)];
  std::vector<int> ri(items);
  std::vector<float> rw(items);
  orchid::ref::topk_softmax(sum.data(), c.tokens, c.experts, c.top_k, ri.data(), rw.data());
  const auto ref = orchid::ref::permute(ri.data(), c.tokens, c.experts, c.top_k);
  DeviceBuffer<float> dhi, dlo, db, dw(items);
  DeviceBuffer<int> di(items), off(c.experts + 1), rt(items), re(items), sr(items), act(c.experts), nact(1);
  DeviceBuffer<uint8_t> scratch(moe_permute_scratch_bytes(c.tokens, c.experts, c.top_k));
  dhi.upload(hi);
  dlo.upload(lo);
  db.upload(bias);
  for (auto* b : {&di, &off, &rt, &re, &sr, &act, &nact}) orchid::testing::poison(*b);
  orchid::testing::poison(dw);
  MoeRouting r{off.get(), rt.get(), re.get(), sr.get(), act.get(), nact.get()};
  moe_route(dhi.get(), c.tokens, c.experts, c.top_k, di.get(), dw.get(), r, scratch.get(), nullptr, dlo.get(),
            db.get());
  ORCHID_TEST_CUDA(cudaDeviceSynchronize());
  const std::string n =
      std::string(c.name) + (items <= moe_route_fused_max_items() ? " split (fused)" : " split (general)");
  EXPECT_TRUE(orchid::testing::check_exact((n + " idx").c_str(), di.download(), ri));
  EXPECT_TRUE(orchid::testing::check_close((n + " weights").c_str(), dw.download(),
                                           std::vector<double>(rw.begin(), rw.end()), 1e-7, 1e-6, 1e-6));
  EXPECT_TRUE(orchid::testing::check_exact((n + " row_token").c_str(), rt.download(), ref.row_token));
  EXPECT_TRUE(orchid::testing::check_exact((n + " slot_row").c_str(), sr.download(), ref.slot_row));
}

// Expert parallelism: with a range [begin, begin + count) the rows of the local experts come first, grouped
// by local id, then every other expert's rows as one extra group; the reference is the full permutation over
// those keys (local ids, then one key for the rest), with row_expert 0 and no slot for the rest, and active
// listing local experts only. Every EP2/EP4/EP8 range, on both routing paths.
TEST_P(RouteTest, ExpertRangesGroupTheLocalRows) {
  ORCHID_REQUIRE_GPU_OR_SKIP();
  const RouteCase c = GetParam();
  std::mt19937_64 rng(orchid::testing::named_seed(c.name) + 2);
  const int items = c.tokens * c.top_k;
  std::vector<float> logits(size_t(c.tokens) * c.experts);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  for (auto& v : logits) v = nd(rng);
  std::vector<int> ri(items);
  std::vector<float> rw(items);
  orchid::ref::topk_softmax(logits.data(), c.tokens, c.experts, c.top_k, ri.data(), rw.data());
  DeviceBuffer<float> dl, dw(items);
  DeviceBuffer<int> di(items), off(c.experts + 1), rt(items), re(items), sr(items), act(c.experts), nact(1);
  DeviceBuffer<uint8_t> scratch(moe_permute_scratch_bytes(c.tokens, c.experts, c.top_k));
  dl.upload(logits);
  for (int ep : {2, 4, 8}) {
    const int count = c.experts / ep;
    for (int begin = 0; begin < c.experts; begin += count) {
      std::vector<int> keys(items);
      for (int i = 0; i < items; ++i)
        keys[size_t(i)] =
            ri[size_t(i)] >= begin && ri[size_t(i)] < begin + count ? ri[size_t(i)] - begin : count;
      auto ref = orchid::ref::permute(keys.data(), c.tokens, count + 1, c.top_k);
      const int local_rows = ref.offsets[size_t(count)];
      for (int row = local_rows; row < items; ++row) ref.row_expert[size_t(row)] = 0;
      for (int i = 0; i < items; ++i)
        if (keys[size_t(i)] == count) ref.slot_row[size_t(i)] = -1;
      if (!ref.active.empty() && ref.active.back() == count) ref.active.pop_back();
      for (auto* b : {&di, &off, &rt, &re, &sr, &act, &nact}) orchid::testing::poison(*b);
      MoeRouting r{off.get(), rt.get(), re.get(), sr.get(), act.get(), nact.get()};
      moe_route(dl.get(), c.tokens, c.experts, c.top_k, di.get(), dw.get(), r, scratch.get(), nullptr,
                nullptr, nullptr, MoeExpertRange{begin, count});
      ORCHID_TEST_CUDA(cudaDeviceSynchronize());
      const std::string n = std::string(c.name) + " EP" + std::to_string(ep) + " experts [" +
                            std::to_string(begin) + ", " + std::to_string(begin + count) + ")" +
                            (items <= moe_route_fused_max_items() ? " (fused)" : " (general)");
      EXPECT_TRUE(orchid::testing::check_exact((n + " idx").c_str(), di.download(), ri));
      auto got_off = off.download();
      got_off.resize(size_t(count) + 2);
      EXPECT_TRUE(orchid::testing::check_exact((n + " offsets").c_str(), got_off, ref.offsets));
      EXPECT_TRUE(orchid::testing::check_exact((n + " row_token").c_str(), rt.download(), ref.row_token));
      EXPECT_TRUE(orchid::testing::check_exact((n + " row_expert").c_str(), re.download(), ref.row_expert));
      EXPECT_TRUE(orchid::testing::check_exact((n + " slot_row").c_str(), sr.download(), ref.slot_row));
      std::vector<int> got_active = act.download(), ref_active = ref.active;
      got_active.resize(size_t(count));
      ref_active.resize(size_t(count), -1);
      EXPECT_TRUE(orchid::testing::check_exact((n + " active").c_str(), got_active, ref_active));
      EXPECT_EQ(nact.download()[0], int(ref.active.size())) << n;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, RouteTest,
                         ::testing::Values(RouteCase{"t1_e32", 1, 32, 4}, RouteCase{"t7_e128", 7, 128, 4},
                                           RouteCase{"t32_e32_fused_limit", 32, 32, 4},
                                           RouteCase{"t33_e32", 33, 32, 4}, RouteCase{"t63_e32", 63, 32, 4},
                                           RouteCase{"t64_e32", 64, 32, 4}, RouteCase{"t256_e32", 256, 32, 4},
                                           RouteCase{"t257_e32_general", 257, 32, 4},
                                           RouteCase{"t100_e256_k8", 100, 256, 8}),
                         [](const ::testing::TestParamInfo<RouteCase>& i) {
                           return std::string(i.param.name);
                         });

}  // namespace
}  // namespace orchid::kernels
