// Data-parallel attention replicas sharing the experts' ranks (CpuBackend::replicas with EP groups that
// span replicas), one engine each, stepping in lockstep behind an EngineGroup, on the golden tiny checkpoint
// (2 KV heads, 8 experts): EP2 DP2 TP1, EP4 DP4 TP1 and EP4 DP2 TP2. Requests go first to replica 0 alone
// (the others run empty steps for many steps), then spread over every replica, chunked and with prefix
// hits; each gets exactly the tokens one rank alone gives it (logprobs within 1e-5: the EP ranks sum the
// experts in another order).
#include <gtest/gtest.h>

#include <random>

#include "engine/engine_group.h"
#include "runtime/cpu/cpu_backend.h"
#include "test_util.h"

namespace orchid::engine {
namespace {

using test::Req;

std::string checkpoint() {
  return std::string(ORCHID_SOURCE_DIR) + "/tests/golden/tiny/checkpoint";
}

runtime::cpu::CpuBackendOptions options(model::ParallelConfig pc) {
  runtime::cpu::CpuBackendOptions o;
  o.page_size = 4;
  o.num_full_pages = 64;
  o.num_sliding_pages = 40;
  o.parallel = pc;
  return o;
}

EngineConfig engine_config() {
  EngineConfig c;
  c.max_num_seqs = 4;
  c.max_num_batched_tokens = 24;  // longer prompts arrive in chunks
  c.max_model_len = 128;
  return c;
}

RequestEvent alone(const Req& r) {
  EngineConfig c = engine_config();
  c.enable_prefix_caching = false;
  c.max_num_seqs = 1;
  Engine e(runtime::cpu::CpuBackend::create(checkpoint(), options({1, 1, 1})), c);
  auto s = e.submit(r.spec());
  e.run_until_idle();
  return s->wait_all();
}

std::vector<Req> requests() {
  std::mt19937 rng(17);
  std::vector<int32_t> prefix(20);
  for (auto& t : prefix) t = 3 + int32_t(rng() % 1000);
  std::vector<Req> reqs;
  for (int i = 0; i < 14; ++i) {
    Req r;
    if (i % 3 == 0) r.prompt = prefix;  // prefix-cache hits within a replica
    for (int k = 3 + int(rng() % 30); k > 0; --k) r.prompt.push_back(3 + int32_t(rng() % 1000));
    r.sampling.temperature = i % 2 ? 0.0f : 0.8f;
    if (i % 4 == 1) r.sampling.num_logprobs = 2;
    if (i % 5 == 2) r.sampling.repetition_penalty = 1.3f;
    r.seed = 500 + uint64_t(i);
    r.max_tokens = i < 3 ? 20 : 4 + int32_t(rng() % 10);
    r.ignore_eos = true;
    reqs.push_back(r);
  }
  return reqs;
}

TEST(EngineDp, ReplicasSharingTheExpertsAnswerAsOneRank) {
  const std::vector<Req> reqs = requests();
  std::vector<RequestEvent> want;
  for (const Req& r : reqs) want.push_back(alone(r));
  for (const model::ParallelConfig pc :
       {model::ParallelConfig{1, 2, 2}, model::ParallelConfig{1, 4, 4}, model::ParallelConfig{2, 2, 4}}) {
    SCOPED_TRACE(pc.describe());
    const auto replicas = runtime::cpu::CpuBackend::create_replicas(checkpoint(), options(pc));
    const int n = pc.dp;
    ASSERT_EQ(replicas[0]->lockstep_replicas(), n);
    auto round = std::make_shared<StepRound>(n);
    std::vector<std::shared_ptr<Engine>> engines;
    for (int i = 0; i < n; ++i)
      engines.push_back(std::make_shared<Engine>(
          replicas[size_t(i)], EngineGroup::group_engine_config(engine_config(), i, n, round)));
    EngineGroup group(engines);
    for (auto& e : engines) e->start();
    std::vector<std::shared_ptr<RequestStream>> streams(reqs.size());
    std::vector<RequestEvent> got(reqs.size());
    // Replica 0 alone first: the others take part in its steps with nothing of their own.
    for (size_t i = 0; i < 3; ++i) streams[i] = engines[0]->submit(reqs[i].spec());
    for (size_t i = 0; i < 3; ++i) got[i] = streams[i]->wait_all();
    EXPECT_GE(engines[0]->metrics().steps, 15);
    for (int i = 1; i < n; ++i) EXPECT_EQ(engines[size_t(i)]->metrics().steps, 0) << "replica " << i;
    // Then everywhere: two to the last replica directly, the rest to the least loaded.
    for (size_t i = 3; i < reqs.size(); ++i)
      streams[i] = i % 6 == 4 ? engines[size_t(n - 1)]->submit(reqs[i].spec()) : group.submit(reqs[i].spec());
    for (size_t i = 3; i < reqs.size(); ++i) got[i] = streams[i]->wait_all();
    for (size_t i = 0; i < reqs.size(); ++i) {
      EXPECT_EQ(got[i].token_ids, want[i].token_ids) << "request " << i;
      EXPECT_EQ(got[i].finish, want[i].finish) << "request " << i;
      ASSERT_EQ(got[i].logprobs.size(), want[i].logprobs.size()) << "request " << i;
      // Logprobs: the same tokens, values within the rounding of the expert sum's order (EP ranks).
      for (size_t k = 0; k < got[i].logprobs.size(); ++k) {
        const auto &a = got[i].logprobs[k], &b = want[i].logprobs[k];
        EXPECT_NEAR(a.logprob, b.logprob, 1e-5) << "request " << i;
        ASSERT_EQ(a.top.size(), b.top.size()) << "request " << i;
        for (size_t j = 0; j < a.top.size(); ++j) {
          EXPECT_EQ(a.top[j].first, b.top[j].first) << "request " << i;
          EXPECT_NEAR(a.top[j].second, b.top[j].second, 1e-5) << "request " << i;
        }
      }
    }
    for (int i = 0; i < n; ++i) EXPECT_GT(engines[size_t(i)]->metrics().steps, 0) << "replica " << i;
    group.stop();
    const EngineMetrics m = group.metrics();
    EXPECT_EQ(m.requests_finished, int64_t(reqs.size()));
    EXPECT_EQ(m.kv_full_pages_used, 0);
  }
}

}  // namespace
}  // namespace orchid::engine
