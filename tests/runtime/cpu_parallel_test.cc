// The CPU backend split over ranks (threads exchanging through in-process communicators) against one rank on
// the same synthetic weights: every TP x EP combination of 1, 2, 4 and 8 ranks the seed deploys (and the
// mixed ones), with 8 KV heads and 16 experts so that TP8 and EP8 divide the model. Logits of a prefill
// that crosses the sliding window, chunked, then greedy decoding: logits within 1e-5 relative of one rank,
// greedy tokens equal. Also the golden tiny checkpoint at TP2 and run_layer on a sharded backend.
// Data parallel: every TP x EP x DP combination with DP > 1 of 2, 4 and 8 ranks, the replicas each running
// their own sequence in lockstep (different lengths and starts, idle steps, a replica with nothing at all),
// each against one rank; the LeadReplica face (orchid forward, layer) and a refused batch in a lockstep
// replica that leaves the others running.
#include <gtest/gtest.h>

#include <cmath>
#include <thread>

#include "core/error.h"
#include "golden.h"
#include "model/synthetic.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/lockstep.h"
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

// The same with a vocabulary of 8192: the DP tests run many sequences, and an lm_head of the full vocabulary
// on every position would be most of their time.
model::ModelConfig small_vocabulary() {
  model::ModelConfig c = eight_kv_heads();
  c.vocab_size = 8192;
  c.eos_token_ids = {8191};
  c.name += ", vocabulary 8192";
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
  const model::LoadedModel weights = synthetic_model(c, 5);  // copies share the tensors
  for (int tp : {1, 2, 4, 8})
    for (int ep : {1, 2, 4, 8}) {
      if (tp % ep != 0 || (tp == 1 && ep == 1)) continue;
      CpuBackendOptions o;
      o.parallel = {tp, 1, ep};
      CpuBackend split(weights, o);
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

// Steps run() takes: the prompt in chunks of 13, then one per decoded token.
int steps_of(size_t prompt, int decode) {
  return int((prompt + 12) / 13) + decode;
}

TEST(CpuParallel, EveryDpCombinationMatchesOneRank) {
  const model::ModelConfig c = small_vocabulary();
  const int decode = 4;
  // Replica i's sequence: 37 - 4i tokens; with 4 or more replicas the last one runs nothing.
  std::vector<std::vector<int32_t>> prompts;
  std::vector<Outputs> refs;
  const model::LoadedModel weights = synthetic_model(c, 5);  // copies share the tensors
  {
    CpuBackend one(weights, {});
    for (int i = 0; i < 7; ++i) {
      prompts.push_back(prompt_of(37 - 4 * i, 8192 - 100 * i));
      refs.push_back(run(one, prompts.back(), decode));
    }
  }
  int checked = 0;
  for (int world : {2, 4, 8})
    for (int tp = 1; tp < world; tp *= 2)
      for (int ep = 1; ep <= world; ep *= 2) {
        CpuBackendOptions o;
        o.parallel = {tp, world / tp, ep};
        o.max_tokens = 64;
        const int dp = o.parallel.dp;
        SCOPED_TRACE(o.parallel.describe());
        const auto replicas = CpuBackend::replicas(weights, o);
        ASSERT_EQ(int(replicas.size()), dp);
        EXPECT_EQ(replicas[0]->lockstep_replicas(), tp % ep != 0 ? dp : 1);
        // Every replica makes the same number of forward calls, empty ones before (i % 3 of them) and after
        // its sequence, each replica on its own thread: a lockstep replica's step needs all the others'.
        const int runs = dp >= 4 ? dp - 1 : dp;
        int total = 0;
        for (int i = 0; i < runs; ++i)
          total = std::max(total, i % 3 + steps_of(prompts[size_t(i)].size(), decode));
        std::vector<Outputs> got(static_cast<size_t>(dp));
        std::vector<std::string> errors(static_cast<size_t>(dp));
        std::vector<std::thread> threads;
        for (int i = 0; i < dp; ++i)
          threads.emplace_back([&, i] {
            try {
              Backend& b = *replicas[size_t(i)];
              int done = 0;
              if (i < runs) {
                for (; done < i % 3; ++done) b.forward(StepBatch{});
                got[size_t(i)] = run(b, prompts[size_t(i)], decode);
                done += steps_of(prompts[size_t(i)].size(), decode);
              }
              for (; done < total; ++done) b.forward(StepBatch{});
            } catch (const std::exception& e) {
              errors[size_t(i)] = e.what();
            }
          });
        for (auto& t : threads) t.join();
        for (int i = 0; i < dp; ++i) {
          EXPECT_EQ(errors[size_t(i)], "") << "replica " << i;
          if (i >= runs) continue;
          const Outputs& want = refs[size_t(i)];
          ASSERT_EQ(got[size_t(i)].logits.size(), want.logits.size()) << "replica " << i;
          const double err = rel_l2(got[size_t(i)].logits, want.logits);
          EXPECT_LT(err, 1e-5) << "replica " << i;
          EXPECT_EQ(got[size_t(i)].greedy, want.greedy) << "replica " << i;
          if (i == 0)
            std::printf("[info] %s: replica 0 logits rel L2 vs one rank %.2e, greedy %s\n",
                        o.parallel.describe().c_str(), err,
                        got[0].greedy == want.greedy ? "equal" : "DIFFERENT");
        }
        ++checked;
      }
  EXPECT_EQ(checked, 20);  // 2 + 3 + 3 + 4 + 4 + 4: DP2 TP1, DP2 TP2, DP4 TP1, DP2 TP4, DP4 TP2, DP8 TP1
}

TEST(CpuParallel, LeadReplicaAndARefusedBatch) {
  const model::ModelConfig c = small_vocabulary();
  const auto prompt = prompt_of(29, 8000);
  CpuBackend one(synthetic_model(c, 5), {});
  const Outputs ref = run(one, prompt, 3);
  CpuBackendOptions o;
  o.parallel = {1, 4, 4};  // EP4 DP4 TP1: every MoE block gathers all four replicas
  o.max_tokens = 64;
  auto replicas = CpuBackend::replicas(synthetic_model(c, 5), o);
  LeadReplica lead({replicas.begin(), replicas.end()});
  const Outputs got = run(lead, prompt, 3);
  EXPECT_LT(rel_l2(got.logits, ref.logits), 1e-5);
  EXPECT_EQ(got.greedy, ref.greedy);
  // One layer through the lead, the others taking part with no tokens.
  std::vector<float> x(size_t(7 * c.hidden_size));
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::cos(0.21f * float(i));
  std::vector<int32_t> ka, kb;
  const auto ya = one.run_layer(1, x, 7, &ka), yb = lead.run_layer(1, x, 7, &kb);
  EXPECT_LT(rel_l2(yb, ya), 1e-5);
  EXPECT_EQ(ka, kb);
  // A refused batch (token id outside the vocabulary) and a bad layer: errors, and the other replicas are
  // not left waiting in the step's collectives (the next steps run).
  StepBatch bad;
  bad.tokens = {int32_t(c.vocab_size)};
  bad.seqs.emplace_back();
  bad.seqs[0].num_tokens = 1;
  bad.seqs[0].num_full_pages = bad.seqs[0].num_sliding_pages = 1;
  bad.full_page_table = bad.sliding_page_table = {0};
  EXPECT_THROW(lead.forward(bad), Error);
  EXPECT_THROW(lead.run_layer(99, x, 7, nullptr), Error);
  const Outputs again = run(lead, prompt, 3);
  EXPECT_EQ(again.greedy, ref.greedy);
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
  EXPECT_THROW(CpuBackend(synthetic_model(c, 1), o), Error);  // one attention replica: replicas() makes two
  o.parallel = {2, 2, 8};
  EXPECT_THROW(CpuBackend::replicas(synthetic_model(c, 1), o), Error);  // EP8 over 4 ranks
}

}  // namespace
}  // namespace orchid::runtime::cpu
