// The engine over the fake backend: every request gets exactly the tokens it gets when run alone, whatever
// shares its steps, its pages or its cached prefix, and however often it is preempted.
#include "engine/engine.h"

#include <gtest/gtest.h>

#include <random>

#include "core/error.h"
#include "test_util.h"

namespace orchid::engine {
namespace {

using test::expect_same;
using test::fake_options;
using test::Harness;
using test::Req;
using test::run_alone;
using test::tokens;
using testing::FakeBackend;
using testing::FakeBackendOptions;

TEST(Engine, GreedyRequestStreamsOneEventPerToken) {
  Harness h(fake_options(), {});
  Req r;
  r.prompt = {5, 6, 7, 8, 9};
  r.sampling.temperature = 0;
  r.ignore_eos = true;
  r.max_tokens = 20;
  auto stream = h.engine.submit(r.spec());
  std::vector<int32_t> ids;
  int events = 0;
  RequestEvent last;
  // A consumer that keeps up sees one event per token.
  while (h.engine.step()) {
    while (auto ev = stream->poll()) {
      ++events;
      EXPECT_EQ(ev->token_ids.size(), 1u);
      ids.insert(ids.end(), ev->token_ids.begin(), ev->token_ids.end());
      last = std::move(*ev);
    }
  }
  h.run();
  EXPECT_EQ(events, 20);
  EXPECT_EQ(ids.size(), 20u);
  EXPECT_EQ(last.finish, FinishReason::kLength);
  EXPECT_EQ(last.usage.prompt_tokens, 5);
  EXPECT_EQ(last.usage.completion_tokens, 20);
  // The fake's outputs depend on the context: another prompt gives other tokens.
  Req other = r;
  other.prompt = {5, 6, 7, 8, 10};
  EXPECT_NE(run_alone(other, h.options).token_ids, ids);
  EXPECT_EQ(run_alone(r, h.options).token_ids, ids);
}

// Mixed sampling settings, drawn per request.
runtime::SamplingParams random_sampling(std::mt19937& rng) {
  runtime::SamplingParams p;
  switch (rng() % 5) {
    case 0:
      p.temperature = 0;
      break;
    case 1:
      p.temperature = 0.8f;
      p.top_k = 5;
      break;
    case 2:
      p.temperature = 1.0f;
      p.top_p = 0.7f;
      p.min_p = 0.05f;
      break;
    case 3:
      p.temperature = 0.0f;
      p.repetition_penalty = 1.3f;
      p.frequency_penalty = 0.5f;
      p.presence_penalty = 0.3f;
      break;
    default:
      p.temperature = 1.2f;
      p.presence_penalty = 0.4f;
      break;
  }
  if (rng() % 3 == 0) p.num_logprobs = int32_t(rng() % 4);
  return p;
}

TEST(Engine, ConcurrentRequestsGetTheirAloneTokens) {
  std::mt19937 rng(11);
  // A pool small enough to force preemptions, a budget small enough to chunk prefills.
  FakeBackendOptions o = fake_options(80, 40, 300);
  EngineConfig c;
  c.max_num_seqs = 12;
  c.max_num_batched_tokens = 48;
  Harness h(o, c);
  const std::vector<int32_t> shared1 = tokens(rng, 37), shared2 = tokens(rng, 21);
  std::vector<Req> reqs;
  for (int i = 0; i < 40; ++i) {
    Req r;
    const auto& base = i % 3 == 0 ? shared1 : i % 3 == 1 ? shared2 : std::vector<int32_t>{};
    r.prompt = base;
    for (int32_t t : tokens(rng, 1 + int32_t(rng() % 40))) r.prompt.push_back(t);
    r.sampling = random_sampling(rng);
    r.seed = rng();
    r.max_tokens = 1 + int32_t(rng() % 60);
    r.ignore_eos = i % 4 == 0;
    reqs.push_back(r);
  }
  std::vector<std::shared_ptr<RequestStream>> streams;
  size_t next = 0;
  while (next < reqs.size() || h.engine.num_live_requests() > 0) {
    // Staggered arrivals: a few new requests every few steps.
    if (next < reqs.size() && rng() % 3 == 0) {
      for (int k = 0; k < 3 && next < reqs.size(); ++k)
        streams.push_back(h.engine.submit(reqs[next++].spec()));
    }
    h.engine.step();
    h.engine.check_invariants();
  }
  h.run();
  for (size_t i = 0; i < reqs.size(); ++i) {
    const RequestEvent got = streams[i]->wait_all();
    expect_same(got, run_alone(reqs[i], o), i);
  }
  const auto m = h.engine.metrics();
  EXPECT_GT(m.preemptions, 0);
  EXPECT_GT(m.prefix_hit_tokens, 0);
  EXPECT_LE(h.fake->max_batch_tokens(), c.max_num_batched_tokens);
  EXPECT_LE(h.fake->max_batch_seqs(), c.max_num_seqs);
}

TEST(Engine, PrefixCacheHitChangesNothing) {
  std::mt19937 rng(3);
  FakeBackendOptions o = fake_options();
  Harness h(o, {});
  const auto prefix = tokens(rng, 30);
  Req a, b;
  a.prompt = b.prompt = prefix;
  a.prompt.push_back(7);
  b.prompt.push_back(9);
  b.prompt.push_back(11);
  a.sampling.temperature = b.sampling.temperature = 0.9f;
  a.seed = 1;
  b.seed = 2;
  a.max_tokens = b.max_tokens = 25;
  auto sa = h.engine.submit(a.spec());
  h.run();
  auto sb = h.engine.submit(b.spec());
  h.run();
  const RequestEvent gb = sb->wait_all();
  EXPECT_EQ(gb.usage.cached_tokens, 28);  // 7 full pages of the shared 30 tokens
  EXPECT_EQ(gb.token_ids, run_alone(b, o).token_ids);
  EXPECT_EQ(sa->wait_all().usage.cached_tokens, 0);
  auto sb2 = h.engine.submit(b.spec());
  h.run();
  const RequestEvent gb2 = sb2->wait_all();
  // The same request again: every full page but the one holding the last prompt token (which must be
  // computed to sample) comes from the cache.
  EXPECT_EQ(gb2.token_ids, gb.token_ids);
  EXPECT_EQ(gb2.usage.cached_tokens, 28);
  EXPECT_NEAR(h.engine.metrics().prefix_hit_rate(), double(28 + 28) / double(31 + 32 + 32), 1e-12);
}

TEST(Engine, PreemptionChangesNothing) {
  std::mt19937 rng(5);
  // 24 full pages (96 tokens) for four sequences that grow to 70 tokens each.
  FakeBackendOptions o = fake_options(24, 16, 96);
  EngineConfig c;
  c.max_num_seqs = 4;
  c.max_num_batched_tokens = 64;
  Harness h(o, c);
  std::vector<Req> reqs(4);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 4; ++i) {
    reqs[size_t(i)].prompt = tokens(rng, 20);
    reqs[size_t(i)].sampling.temperature = i % 2 ? 0.0f : 1.0f;
    reqs[size_t(i)].seed = uint64_t(i);
    reqs[size_t(i)].ignore_eos = true;
    reqs[size_t(i)].max_tokens = 50;
    streams.push_back(h.engine.submit(reqs[size_t(i)].spec()));
  }
  h.run();
  int preempted = 0;
  for (int i = 0; i < 4; ++i) {
    const RequestEvent got = streams[size_t(i)]->wait_all();
    preempted += got.usage.num_preemptions;
    EXPECT_EQ(got.token_ids, run_alone(reqs[size_t(i)], o).token_ids) << i;
    EXPECT_EQ(got.token_ids.size(), 50u);
  }
  EXPECT_GT(preempted, 0);
  EXPECT_EQ(h.engine.metrics().preemptions, preempted);
}

TEST(Engine, ChunkedPrefillStaysWithinTheBudget) {
  std::mt19937 rng(8);
  FakeBackendOptions o = fake_options();
  EngineConfig c;
  c.max_num_seqs = 4;
  c.max_num_batched_tokens = 16;
  Harness h(o, c);
  Req r;
  r.prompt = tokens(rng, 300);
  r.sampling.temperature = 0;
  r.max_tokens = 10;
  auto s = h.engine.submit(r.spec());
  h.run();
  EXPECT_EQ(s->wait_all().token_ids, run_alone(r, o).token_ids);  // alone: one 300-token chunk
  EXPECT_LE(h.fake->max_batch_tokens(), 16);
  EXPECT_GE(h.fake->num_steps(), 300 / 16);
}

TEST(Engine, AbortEndsRunningAndWaitingRequests) {
  std::mt19937 rng(9);
  EngineConfig c;
  c.max_num_seqs = 2;
  Harness h(fake_options(), c);
  Req r;
  r.prompt = tokens(rng, 10);
  r.seed = 77;
  r.ignore_eos = true;
  r.max_tokens = 100;
  auto a = h.engine.submit(r.spec()), b = h.engine.submit(r.spec()), w = h.engine.submit(r.spec());
  for (int i = 0; i < 5; ++i) h.engine.step();
  h.engine.abort(a->id());
  h.engine.abort(w->id());  // never admitted: max_num_seqs = 2
  h.engine.abort(12345);    // unknown: ignored
  h.engine.step();
  h.engine.check_invariants();
  const RequestEvent ga = a->wait_all(), gw = w->wait_all();
  EXPECT_EQ(ga.finish, FinishReason::kAbort);
  EXPECT_EQ(ga.usage.completion_tokens, int32_t(ga.token_ids.size()));
  EXPECT_GT(ga.token_ids.size(), 0u);
  EXPECT_EQ(gw.finish, FinishReason::kAbort);
  EXPECT_TRUE(gw.token_ids.empty());
  h.engine.abort(a->id());  // finished already: ignored
  h.run();
  const RequestEvent gb = b->wait_all();
  EXPECT_EQ(gb.finish, FinishReason::kLength);
  EXPECT_EQ(gb.token_ids, run_alone(r, h.options).token_ids);
  const auto m = h.engine.metrics();
  EXPECT_EQ(m.requests_aborted, 2);
  EXPECT_EQ(m.requests_finished, 1);
}

TEST(Engine, BackendErrorFailsItsBatchOnly) {
  FakeBackendOptions o = fake_options();
  o.reject_token = 63;
  Harness h(o, {});
  Req bad, good;
  bad.prompt = {1, 63, 2};
  good.prompt = {1, 2, 3};
  good.ignore_eos = true;
  good.max_tokens = 5;
  // A fixed seed: with the engine's random one the good request could itself draw the rejected token.
  good.seed = 7;
  auto sb = h.engine.submit(bad.spec());
  h.run();
  const RequestEvent gb = sb->wait_all();
  EXPECT_EQ(gb.finish, FinishReason::kError);
  EXPECT_NE(gb.error.find("63"), std::string::npos);
  auto sg = h.engine.submit(good.spec());
  h.run();
  const RequestEvent gg = sg->wait_all();
  ASSERT_EQ(gg.finish, FinishReason::kLength) << gg.error;
  EXPECT_EQ(gg.token_ids.size(), 5u);
  EXPECT_EQ(h.engine.metrics().requests_failed, 1);
}

TEST(Engine, PriorityOrdersTheQueue) {
  EngineConfig c;
  c.max_num_seqs = 1;
  Harness h(fake_options(), c);
  Req r;
  r.prompt = {1, 2, 3};
  r.ignore_eos = true;
  r.max_tokens = 3;
  Req low = r, high = r;
  low.priority = 5;
  high.priority = -1;
  auto sl = h.engine.submit(low.spec()), sh = h.engine.submit(high.spec()), sr = h.engine.submit(r.spec());
  std::vector<int64_t> order;
  while (h.engine.step()) {
    for (auto* s : {&sl, &sh, &sr})
      if ((*s)->finished() && std::find(order.begin(), order.end(), (*s)->id()) == order.end())
        order.push_back((*s)->id());
  }
  EXPECT_EQ(order, (std::vector<int64_t>{sh->id(), sr->id(), sl->id()}));
}

TEST(Engine, LoopThreadServesAndStopAbortsTheRest) {
  // A long context, so that the endless request is still running when stop() comes.
  auto fake = std::make_shared<FakeBackend>(fake_options(8192, 128, 32768));
  Engine engine(fake, {});
  engine.start();
  Req r;
  r.prompt = {1, 2, 3, 4};
  r.sampling.temperature = 0;
  r.ignore_eos = true;
  r.max_tokens = 10;
  auto s = engine.submit(r.spec());
  const RequestEvent got = s->wait_all();
  EXPECT_EQ(got.token_ids, run_alone(r, fake_options()).token_ids);
  EXPECT_THROW(engine.step(), InternalError);
  r.max_tokens = -1;
  auto endless = engine.submit(r.spec());
  ASSERT_TRUE(endless->next(std::chrono::seconds(10)).has_value());  // it runs
  engine.stop();
  EXPECT_EQ(endless->wait_all().finish, FinishReason::kAbort);
  EXPECT_THROW(engine.submit(r.spec()), Error);
}

}  // namespace
}  // namespace orchid::engine
