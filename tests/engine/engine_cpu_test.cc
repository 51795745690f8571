// The engine on the CPU backend with the golden tiny checkpoint (sliding window 8): 32 concurrent requests
// with staggered arrivals, shared prefixes and different sampling settings each get exactly the tokens they
// get alone, while prefix-cache hits and preemptions happen.
#include <gtest/gtest.h>

#include <random>

#include "engine/engine.h"
#include "runtime/cpu/cpu_backend.h"
#include "test_util.h"

namespace orchid::engine {
namespace {

using test::expect_same;
using test::Req;

std::string checkpoint() {
  return std::string(ORCHID_SOURCE_DIR) + "/tests/golden/tiny/checkpoint";
}

std::shared_ptr<runtime::Backend> cpu_backend(int32_t full_pages, int32_t sliding_pages) {
  runtime::cpu::CpuBackendOptions o;
  o.page_size = 4;
  o.num_full_pages = full_pages;
  o.num_sliding_pages = sliding_pages;
  return runtime::cpu::CpuBackend::create(checkpoint(), o);
}

constexpr int32_t kMaxModelLen = 256;

RequestEvent alone(const Req& r) {
  EngineConfig c;
  c.enable_prefix_caching = false;
  c.max_num_seqs = 1;
  c.max_model_len = kMaxModelLen;
  Engine e(cpu_backend(kMaxModelLen / 4, kMaxModelLen / 4), c);
  auto s = e.submit(r.spec());
  e.run_until_idle();
  return s->wait_all();
}

runtime::SamplingParams sampling(int i) {
  runtime::SamplingParams p;
  switch (i % 6) {
    case 0:
      p.temperature = 0;
      break;  // greedy
    case 1:
      p.temperature = 0.8f;
      break;  // seeded sampling
    case 2:
      p.temperature = 1.0f;
      p.top_k = 20;
      p.top_p = 0.9f;
      break;
    case 3:
      p.temperature = 0.7f;
      p.min_p = 0.05f;
      break;
    case 4:
      p.temperature = 0;
      p.repetition_penalty = 1.2f;
      p.frequency_penalty = 0.3f;
      break;
    default:
      p.temperature = 1.2f;
      p.presence_penalty = 0.5f;
      p.num_logprobs = 2;
      break;
  }
  return p;
}

TEST(EngineCpu, ConcurrentRequestsEqualAloneWithPrefixHitsAndPreemption) {
  std::mt19937 rng(42);
  // Shared prefixes of 13..30 tokens; every request adds its own tail.
  std::vector<std::vector<int32_t>> families(4);
  for (auto& f : families) {
    f.resize(13 + rng() % 18);
    for (auto& t : f) t = 3 + int32_t(rng() % 1000);
  }
  std::vector<Req> reqs;
  for (int i = 0; i < 32; ++i) {
    Req r;
    r.prompt = families[size_t(i) % families.size()];
    for (int k = int(rng() % 12); k >= 0; --k) r.prompt.push_back(3 + int32_t(rng() % 1000));
    r.sampling = sampling(i);
    r.seed = 1000 + uint64_t(i);
    r.max_tokens = 8 + int32_t(rng() % 17);
    r.ignore_eos = i % 2 == 0;
    reqs.push_back(r);
  }
  // A pool of 48 full pages (192 tokens) for up to 8 sequences of up to ~65 tokens: preemption is certain.
  EngineConfig c;
  c.max_num_seqs = 8;
  c.max_num_batched_tokens = 32;  // prompts arrive in chunks
  c.max_model_len = kMaxModelLen;
  c.enable_prefix_caching = true;
  auto backend = cpu_backend(64, 40);
  Engine engine(backend, c);
  std::vector<std::shared_ptr<RequestStream>> streams;
  size_t next = 0;
  while (next < reqs.size() || engine.num_live_requests() > 0) {
    for (int k = 0; k < 2 && next < reqs.size(); ++k) streams.push_back(engine.submit(reqs[next++].spec()));
    engine.step();
    engine.check_invariants();
  }
  const EngineMetrics m = engine.metrics();
  EXPECT_GT(m.preemptions, 0);
  EXPECT_GT(m.prefix_hit_tokens, 0);
  EXPECT_EQ(m.kv_full_pages_used, 0);
  std::printf("32 requests: %lld preemptions, prefix hit rate %.2f, %lld steps\n",
              static_cast<long long>(m.preemptions), m.prefix_hit_rate(), static_cast<long long>(m.steps));
  int hits = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    const RequestEvent got = streams[i]->wait_all();
    const RequestEvent want = alone(reqs[i]);
    hits += got.usage.cached_tokens > 0;
    EXPECT_EQ(got.token_ids, want.token_ids) << "request " << i;
    EXPECT_EQ(got.finish, want.finish) << "request " << i;
    ASSERT_EQ(got.logprobs.size(), want.logprobs.size());
    for (size_t k = 0; k < got.logprobs.size(); ++k) EXPECT_EQ(got.logprobs[k].top, want.logprobs[k].top);
  }
  EXPECT_GT(hits, 4);
}

// Asynchronous scheduling on the CPU backend (its launch() computes at once): decoding steps launched
// before the engine has read the tokens they start from give every request its alone tokens and logprobs.
TEST(EngineCpu, AsyncSchedulingGivesTheAloneTokens) {
  std::mt19937 rng(43);
  std::vector<Req> reqs;
  for (int i = 0; i < 12; ++i) {
    Req r;
    for (int k = 0; k < 5 + int(rng() % 20); ++k) r.prompt.push_back(3 + int32_t(rng() % 1000));
    r.sampling = sampling(i % 4);  // no penalties: they keep steps one at a time
    r.sampling.num_logprobs = i % 3 == 0 ? 2 : -1;
    r.seed = 2000 + uint64_t(i);
    r.max_tokens = 4 + int32_t(rng() % 20);
    r.ignore_eos = i % 2 == 0;
    reqs.push_back(r);
  }
  EngineConfig c;
  c.max_model_len = kMaxModelLen;
  c.async_scheduling = true;
  Engine engine(cpu_backend(128, 64), c);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const Req& r : reqs) streams.push_back(engine.submit(r.spec()));
  int steps = 0;
  while (engine.step()) {
    engine.check_invariants();
    ++steps;
  }
  for (size_t i = 0; i < reqs.size(); ++i) {
    const RequestEvent got = streams[i]->wait_all();
    expect_same(got, alone(reqs[i]), i);
  }
  const EngineMetrics m = engine.metrics();
  EXPECT_EQ(m.kv_full_pages_used, 0);
  EXPECT_GT(m.pipelined_steps, steps / 3) << m.pipelined_steps << " of " << steps << " steps";
}

// A request served from the prefix cache, and one preempted and recomputed, give their alone tokens.
TEST(EngineCpu, PrefixHitAndPreemptionChangeNoOutput) {
  std::mt19937 rng(7);
  std::vector<int32_t> prefix(24);
  for (auto& t : prefix) t = 3 + int32_t(rng() % 1000);
  Req a, b;
  a.prompt = b.prompt = prefix;
  a.prompt.push_back(17);
  b.prompt.push_back(18);
  a.sampling.temperature = 0;
  b.sampling.temperature = 0.9f;
  b.seed = 5;
  a.max_tokens = b.max_tokens = 20;
  a.ignore_eos = b.ignore_eos = true;
  EngineConfig c;
  c.max_model_len = kMaxModelLen;
  {
    Engine e(cpu_backend(64, 40), c);
    auto sa = e.submit(a.spec());
    e.run_until_idle();
    auto sb = e.submit(b.spec());
    e.run_until_idle();
    const RequestEvent gb = sb->wait_all();
    EXPECT_EQ(gb.usage.cached_tokens, 24);
    EXPECT_EQ(gb.token_ids, alone(b).token_ids);
    EXPECT_EQ(sa->wait_all().token_ids, alone(a).token_ids);
  }
  {
    // 16 full pages (64 tokens) for two sequences that grow to 45 tokens each.
    EngineConfig tight = c;
    tight.max_model_len = 64;
    Engine e(cpu_backend(16, 40), tight);
    auto sa = e.submit(a.spec()), sb = e.submit(b.spec());
    e.run_until_idle();
    const RequestEvent ga = sa->wait_all(), gb = sb->wait_all();
    EXPECT_GT(ga.usage.num_preemptions + gb.usage.num_preemptions, 0);
    EXPECT_EQ(ga.token_ids, alone(a).token_ids);
    EXPECT_EQ(gb.token_ids, alone(b).token_ids);
  }
}

}  // namespace
}  // namespace orchid::engine
