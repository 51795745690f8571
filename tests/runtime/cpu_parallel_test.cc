// The CPU backend split over ranks (threads exchanging through in-process communicators) against one rank on
// the same synthetic weights: every TP x EP combination of 1, 2, 4 and 8 ranks the seed deploys (and the
// mixed ones), with 8 KV heads and 16 experts so that TP8 and EP8 divide the model. Logits of a prefill
// that crosses the sliding window, chunked, then greedy decoding: logits within 1e-5 relative of one rank,
// greedy tokens equal. Also the golden tiny checkpoint at TP2 and run_layer on a sharded backend.
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "golden.h"
#include "model/synthetic.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/sequence_runner.h"

namespace orchid::runtime::cpu {
namespace {

model::ModelConfig eight_kv_heads() {
  model::ModelConfig c = model::preset_config("tiny");
  c.num_heads = 32;
  c.num_kv_heads = 8;
  c.num_experts = 16;
  c.name = "tiny, 8 KV heads, 16 experts";
  c.validate(c.name);
  return c;
}

model::LoadedModel synthetic_model(const model::ModelConfig& c, uint64_t seed) {
  model::LoadedModel m;
  m.config = c;
  m.checkpoint = model::synthetic_checkpoint(c, seed);
  return m;
}

struct Outputs {
  std::vector<float> logits;    // every prompt position
  std::vector<int32_t> greedy;  // decoded tokens
};

Outputs run(Backend& b, const std::vector<int32_t>& prompt, int decode) {
  SequenceRunner r(b);
  Outputs out;
  StepOutput o = r.feed(prompt, true, true, 13, &out.logits);  // chunks of 13 across the window of 16
  for (int i = 0; i < decode; ++i) {
    out.greedy.push_back(o.samples.at(0).token);
    o = r.feed({out.greedy.back()}, true);
  }
  return out;
}

double rel_l2(const std::vector<float>& a, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    num += (double(a[i]) - ref[i]) * (double(a[i]) - ref[i]);
    den += double(ref[i]) * ref[i];
  }
  return std::sqrt(num / den);
}

std::vector<int32_t> prompt_of(int n, int vocab) {
  std::vector<int32_t> ids;
  for (int i = 0; i < n; ++i) ids.push_back(int32_t((i * 7919 + 13) % vocab));
  return ids;
}

TEST(CpuParallel, EveryTpEpCombinationMatchesOneRank) {
  const model::ModelConfig c = eight_kv_heads();
  const auto prompt = prompt_of(37, 199000);
  CpuBackend one(synthetic_model(c, 5), {});
  const Outputs ref = run(one, prompt, 6);
  for (int tp : {1, 2, 4, 8})
    for (int ep : {1, 2, 4, 8}) {
      if (tp % ep != 0 || (tp == 1 && ep == 1)) continue;
      CpuBackendOptions o;
      o.parallel = {tp, 1, ep};
      CpuBackend split(synthetic_model(c, 5), o);
      ASSERT_EQ(int(split.plan().ranks.size()), tp);
      const Outputs got = run(split, prompt, 6);
      ASSERT_EQ(got.logits.size(), ref.logits.size());
      const double err = rel_l2(got.logits, ref.logits);
      std::printf("[info] %s: logits rel L2 vs one rank %.2e, greedy %s\n", o.parallel.describe().c_str(),
                  err, got.greedy == ref.greedy ? "equal" : "DIFFERENT");
      EXPECT_LT(err, 1e-5) << o.parallel.describe();
      EXPECT_EQ(got.greedy, ref.greedy) << o.parallel.describe();
    }
}

TEST(CpuParallel, GoldenTinyAtTp2AndRunLayer) {
  const orchid::testing::Golden g = orchid::testing::load_golden();
  auto one = CpuBackend::create(g.checkpoint);
  CpuBackendOptions o;
  o.parallel = {2, 1, 2};
  auto two = CpuBackend::create(g.checkpoint, o);
  const auto seq = g.sequence();
  const Outputs a = run(*one, seq, 4), b = run(*two, seq, 4);
  EXPECT_LT(rel_l2(b.logits, a.logits), 1e-5);
  EXPECT_EQ(a.greedy, b.greedy);
  // One layer alone (teacher forcing) through the shards: same output and experts.
  const auto& cfg = one->model_config();
  std::vector<float> x(size_t(9 * cfg.hidden_size));
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * float(i));
  std::vector<int32_t> ka, kb;
  const auto ya = one->run_layer(1, x, 9, &ka), yb = two->run_layer(1, x, 9, &kb);
  EXPECT_LT(rel_l2(yb, ya), 1e-5);
  EXPECT_EQ(ka, kb);
}

TEST(CpuParallel, ClearErrors) {
  const model::ModelConfig c = eight_kv_heads();
  CpuBackendOptions o;
  o.parallel = {3, 1, 1};
  EXPECT_THROW(CpuBackend(synthetic_model(c, 1), o), Error);  // 8 KV heads
  o.parallel = {2, 2, 4};
  EXPECT_THROW(CpuBackend(synthetic_model(c, 1), o), Error);  // one attention replica per engine
}

}  // namespace
}  // namespace orchid::runtime::cpu
