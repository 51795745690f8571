// The engine over the fake backend: every request gets exactly the tokens it gets when run alone, whatever
// shares its steps, its pages or its cached prefix, and however often it is preempted.
#include "engine/engine.h"

#include <gtest/gtest.h>

#include <random>

#include "core/error.h"
#include "test_util.h"

namespace orchid::engine {
namespace {

using test::Req;
using test::run_alone;
using testing::FakeBackend;
using testing::FakeBackendOptions;

FakeBackendOptions fake_options(int32_t full_pages = 512, int32_t sliding_pages = 128,
                                int32_t max_len = 512) {
  FakeBackendOptions o;
  o.kv.num_full_pages = full_pages;
  o.kv.num_sliding_pages = sliding_pages;
  o.max_position = max_len;
  return o;
}

struct Harness {
  Harness(FakeBackendOptions o, EngineConfig c)
      : options(o), fake(std::make_shared<FakeBackend>(o)), engine(fake, c) {}
  void run() {
    while (engine.step()) engine.check_invariants();
    engine.check_invariants();
    EXPECT_EQ(engine.num_live_requests(), 0u);
    const auto m = engine.metrics();
    EXPECT_EQ(m.kv_full_pages_used, 0);
    EXPECT_EQ(m.kv_sliding_pages_used, 0);
  }
  FakeBackendOptions options;
  std::shared_ptr<FakeBackend> fake;
  Engine engine;
};

std::vector<int32_t> tokens(std::mt19937& rng, int32_t n, int32_t vocab = 64) {
  std::vector<int32_t> t;
  for (int32_t i = 0; i < n; ++i) t.push_back(1 + int32_t(rng() % uint32_t(vocab - 1)));
  return t;
}

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
    const RequestEvent want = run_alone(reqs[i], o);
    EXPECT_EQ(got.token_ids, want.token_ids) << "request " << i;
    EXPECT_EQ(got.finish, want.finish) << "request " << i;
    ASSERT_EQ(got.logprobs.size(), want.logprobs.size());
    for (size_t k = 0; k < got.logprobs.size(); ++k) {
      EXPECT_EQ(got.logprobs[k].logprob, want.logprobs[k].logprob);
      EXPECT_EQ(got.logprobs[k].top, want.logprobs[k].top);
    }
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

TEST(Engine, StopIdsAndEosCutTheAloneOutput) {
  std::mt19937 rng(10);
  FakeBackendOptions o = fake_options();
  int cut = 0;
  for (int trial = 0; trial < 20; ++trial) {
    Req full;
    full.prompt = tokens(rng, 8);
    full.sampling.temperature = 1.0f;
    full.seed = uint64_t(trial);
    full.ignore_eos = true;
    full.max_tokens = 40;
    const auto all = run_alone(full, o).token_ids;
    Req stop = full;
    stop.ignore_eos = false;
    stop.stop_ids = {all[all.size() / 2], 63};
    const RequestEvent got = run_alone(stop, o);
    // Expected: the unconstrained output up to and including the first stop id or EOS (0).
    size_t end = all.size();
    for (size_t i = 0; i < all.size(); ++i) {
      if (all[i] == 0 || all[i] == stop.stop_ids[0] || all[i] == 63) {
        end = i + 1;
        break;
      }
    }
    EXPECT_EQ(got.token_ids, std::vector<int32_t>(all.begin(), all.begin() + std::ptrdiff_t(end)));
    if (end < all.size()) {
      ++cut;
      EXPECT_EQ(got.finish, FinishReason::kStop);
      EXPECT_EQ(got.stop_token, got.token_ids.back());
    }
  }
  EXPECT_GT(cut, 15);
}

TEST(Engine, StopStringsCutTheAloneText) {
  std::mt19937 rng(12);
  FakeBackendOptions o = fake_options();
  o.vocab_size = 16;  // the toy detokenizer's pieces
  int matched = 0;
  for (int trial = 0; trial < 40; ++trial) {
    Req full;
    full.prompt = tokens(rng, 6, 16);
    full.sampling.temperature = 1.0f;
    full.seed = uint64_t(trial);
    full.ignore_eos = true;
    full.max_tokens = 30;
    const auto all = run_alone(full, o).token_ids;
    const std::string text = test::toy_text(all);
    Req stop = full;
    stop.decoder = true;
    // A stop string taken from the middle of the text, often spanning tokens.
    const size_t at = text.size() / 2;
    stop.stop_strings = {text.substr(at, 3)};
    if (trial % 2) stop.include_stop_str = true;
    const RequestEvent got = run_alone(stop, o);
    const size_t first = text.find(stop.stop_strings[0]);
    ASSERT_NE(first, std::string::npos);
    EXPECT_EQ(got.text, text.substr(0, first + (stop.include_stop_str ? 3 : 0))) << "trial " << trial;
    EXPECT_EQ(got.finish, FinishReason::kStop);
    EXPECT_EQ(got.stop_string, stop.stop_strings[0]);
    // The tokens end with the one that completed the match.
    const std::vector<int32_t> prefix(all.begin(), all.begin() + std::ptrdiff_t(got.token_ids.size()));
    EXPECT_EQ(got.token_ids, prefix);
    EXPECT_NE(test::toy_text(prefix).find(stop.stop_strings[0]), std::string::npos);
    const std::vector<int32_t> shorter(prefix.begin(), prefix.end() - 1);
    EXPECT_EQ(test::toy_text(shorter).find(stop.stop_strings[0]), std::string::npos);
    ++matched;
  }
  EXPECT_EQ(matched, 40);
}

TEST(Engine, MinTokensKeepsStopIdsAway) {
  std::mt19937 rng(13);
  FakeBackendOptions o = fake_options();
  o.eos_bonus = 5.0f;  // EOS is by far the likeliest token
  int early = 0;
  for (int trial = 0; trial < 20; ++trial) {
    Req r;
    r.prompt = tokens(rng, 5);
    r.sampling.temperature = 1.0f;
    r.seed = uint64_t(trial);
    r.max_tokens = 30;
    const RequestEvent free = run_alone(r, o);
    early += free.token_ids.size() < 10;
    r.min_tokens = 10;
    const RequestEvent held = run_alone(r, o);
    ASSERT_GE(held.token_ids.size(), 11u);
    for (int i = 0; i < 10; ++i) EXPECT_NE(held.token_ids[size_t(i)], 0);
    EXPECT_EQ(held.finish, FinishReason::kStop);  // EOS right after min_tokens, almost surely
  }
  EXPECT_GT(early, 15);
}

TEST(Engine, LogprobsArriveWithEveryToken) {
  Harness h(fake_options(), {});
  Req r;
  r.prompt = {3, 4, 5};
  r.sampling.temperature = 0;
  r.sampling.num_logprobs = 3;
  r.ignore_eos = true;
  r.max_tokens = 8;
  auto s = h.engine.submit(r.spec());
  h.run();
  const RequestEvent all = s->wait_all();
  ASSERT_EQ(all.logprobs.size(), 8u);
  for (size_t i = 0; i < 8; ++i) {
    ASSERT_EQ(all.logprobs[i].top.size(), 3u);
    EXPECT_EQ(all.logprobs[i].token, all.token_ids[i]);
    EXPECT_EQ(all.logprobs[i].top[0].first, all.token_ids[i]);  // greedy: the sampled one is the top one
    EXPECT_FLOAT_EQ(all.logprobs[i].top[0].second, all.logprobs[i].logprob);
    EXPECT_LT(all.logprobs[i].logprob, 0.0f);
  }
}

TEST(Engine, ContextLimitEndsWithLength) {
  FakeBackendOptions o = fake_options(512, 128, 40);
  Harness h(o, {});
  EXPECT_EQ(h.engine.max_model_len(), 40);
  Req r;
  r.prompt = std::vector<int32_t>(37, 5);
  r.ignore_eos = true;
  r.max_tokens = -1;
  auto s = h.engine.submit(r.spec());
  h.run();
  const RequestEvent got = s->wait_all();
  EXPECT_EQ(got.token_ids.size(), 3u);
  EXPECT_EQ(got.finish, FinishReason::kLength);
  r.prompt.resize(40);
  EXPECT_THROW(h.engine.submit(r.spec()), Error);
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
  auto sb = h.engine.submit(bad.spec());
  h.run();
  const RequestEvent gb = sb->wait_all();
  EXPECT_EQ(gb.finish, FinishReason::kError);
  EXPECT_NE(gb.error.find("63"), std::string::npos);
  auto sg = h.engine.submit(good.spec());
  h.run();
  EXPECT_EQ(sg->wait_all().token_ids.size(), 5u);
  EXPECT_EQ(h.engine.metrics().requests_failed, 1);
}

TEST(Engine, InvalidRequestsNameTheField) {
  Harness h(fake_options(), {});
  auto expect_error = [&](const Req& r, const std::string& field) {
    try {
      h.engine.submit(r.spec());
      ADD_FAILURE() << "accepted a bad " << field;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  };
  Req ok;
  ok.prompt = {1, 2};
  Req r = ok;
  r.prompt = {};
  expect_error(r, "prompt");
  r = ok;
  r.prompt = {1, 64};
  expect_error(r, "prompt");
  r = ok;
  r.sampling.temperature = -1;
  expect_error(r, "temperature");
  r = ok;
  r.sampling.top_p = 0;
  expect_error(r, "top_p");
  r = ok;
  r.sampling.top_k = -2;
  expect_error(r, "top_k");
  r = ok;
  r.sampling.min_p = 1.5f;
  expect_error(r, "min_p");
  r = ok;
  r.sampling.frequency_penalty = 3;
  expect_error(r, "frequency_penalty");
  r = ok;
  r.sampling.presence_penalty = -3;
  expect_error(r, "presence_penalty");
  r = ok;
  r.sampling.repetition_penalty = 0;
  expect_error(r, "repetition_penalty");
  r = ok;
  r.sampling.num_logprobs = 21;
  expect_error(r, "logprobs");
  r = ok;
  r.max_tokens = 0;
  expect_error(r, "max_tokens");
  r = ok;
  r.min_tokens = 20;
  expect_error(r, "min_tokens");
  r = ok;
  r.stop_ids = {99};
  expect_error(r, "stop_token_ids");
  r = ok;
  r.stop_strings = {"x"};  // no decoder
  expect_error(r, "stop");
  EXPECT_EQ(h.engine.metrics().requests_submitted, 0);
}

TEST(Engine, BadLimitsNameTheFlag) {
  auto fake = std::make_shared<FakeBackend>(fake_options());
  EngineConfig c;
  c.max_num_seqs = 0;
  EXPECT_THROW(Engine(fake, c), Error);
  c.max_num_seqs = 64;
  c.max_num_batched_tokens = 32;
  try {
    Engine e(fake, c);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--max-num-batched-tokens"), std::string::npos);
  }
  c = {};
  c.max_model_len = 100000;
  EXPECT_THROW(Engine(fake, c), Error);
  auto tiny = std::make_shared<FakeBackend>(fake_options(512, 2));  // window 8, page 4: needs 3
  EXPECT_THROW(Engine(tiny, {}), Error);
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

TEST(Engine, MetricsAddUp) {
  std::mt19937 rng(14);
  Harness h(fake_options(), {});
  int64_t generated = 0;
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 10; ++i) {
    Req r;
    r.prompt = tokens(rng, 10);
    r.max_tokens = 12;
    streams.push_back(h.engine.submit(r.spec()));
  }
  h.run();
  for (auto& s : streams) generated += s->wait_all().usage.completion_tokens;
  const auto m = h.engine.metrics();
  EXPECT_EQ(m.generation_tokens, generated);
  EXPECT_EQ(m.prompt_tokens, 100);
  EXPECT_EQ(m.requests_finished, 10);
  EXPECT_EQ(m.requests_submitted, 10);
  EXPECT_EQ(m.time_to_first_token.count(), 10u);
  EXPECT_EQ(m.inter_token_latency.count(), uint64_t(generated - 10));
  EXPECT_EQ(int64_t(m.step_time.count()), m.steps);
  EXPECT_GT(m.generation_tokens_per_s, 0.0);
  EXPECT_EQ(m.num_running, 0);
  EXPECT_EQ(m.kv_full_pages_total, 512);
  EXPECT_GT(m.kv_full_pages_cached, 0);
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
