// The request knobs through the engine on the fake backend: stop ids, stop strings, min_tokens, logprobs,
// limits, validation and metrics. Expected outputs come from the same request run without the knob.
#include <gtest/gtest.h>

#include <random>

#include "core/error.h"
#include "engine/engine.h"
#include "test_util.h"

namespace orchid::engine {
namespace {

using test::fake_options;
using test::Harness;
using test::Req;
using test::run_alone;
using test::tokens;
using testing::FakeBackend;
using testing::FakeBackendOptions;

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
  EXPECT_EQ(m.queue_time.count(), 10u);  // each request left the queue once
  EXPECT_LE(m.queue_time.sum(), m.time_to_first_token.sum());
  EXPECT_EQ(m.inter_token_latency.count(), uint64_t(generated - 10));
  EXPECT_EQ(int64_t(m.step_time.count()), m.steps);
  EXPECT_GT(m.generation_tokens_per_s, 0.0);
  EXPECT_EQ(m.num_running, 0);
  EXPECT_EQ(m.kv_full_pages_total, 512);
  EXPECT_GT(m.kv_full_pages_cached, 0);
  // The steps' phases partition their time (the fake backend never waits for a device).
  EXPECT_GE(m.step_schedule_seconds, 0.0);
  EXPECT_GT(m.step_backend_host_seconds, 0.0);
  EXPECT_EQ(m.step_device_wait_seconds, 0.0);
  EXPECT_GT(m.step_outputs_seconds, 0.0);
  const double phases = m.step_schedule_seconds + m.step_backend_host_seconds + m.step_device_wait_seconds +
                        m.step_outputs_seconds;
  EXPECT_NEAR(phases, m.step_time.sum(), 1e-9 * double(m.steps) + 1e-6 * m.step_time.sum());
}

}  // namespace
}  // namespace orchid::engine
