// Random workloads on the fake backend: thousands of requests with random lengths, shared prefixes,
// priorities, aborts and (through small KV pools) preemptions. After every step all invariants hold; at
// the end every page is free and every request has finished exactly once, with the tokens it gets alone
// (an aborted one: a prefix of them).
#include <gtest/gtest.h>

#include <random>

#include "engine/engine.h"
#include "test_util.h"

namespace orchid::engine {
namespace {

using test::Req;
using testing::FakeBackend;
using testing::FakeBackendOptions;

struct Workload {
  const char* name;
  int32_t page, window, full_pages, sliding_pages;
  int32_t max_num_seqs, max_num_batched_tokens;
  bool prefix_caching;
  int requests;
  uint32_t seed;
  // EngineConfig::async_scheduling, over a backend that computes each step only when it is collected (the
  // device behind the host).
  bool async_scheduling = false;
  bool penalties =
      true;  // a fifth of the requests with a frequency penalty (a pipelined plan waits for them)
};

void PrintTo(const Workload& w, std::ostream* os) {
  *os << w.name;
}

class EngineProperty : public ::testing::TestWithParam<Workload> {};

TEST_P(EngineProperty, InvariantsHoldAndEveryRequestEndsOnceWithItsAloneTokens) {
  const Workload w = GetParam();
  std::mt19937 rng(w.seed);
  FakeBackendOptions o;
  o.vocab_size = 48;
  o.kv = {.page_size = w.page,
          .num_full_pages = w.full_pages,
          .num_sliding_pages = w.sliding_pages,
          .sliding_window = w.window};
  o.max_position = int64_t(w.full_pages) * w.page / 2;
  o.eos_bonus = -1.0f;
  o.deferred = w.async_scheduling;
  EngineConfig c;
  c.max_num_seqs = w.max_num_seqs;
  c.max_num_batched_tokens = w.max_num_batched_tokens;
  c.enable_prefix_caching = w.prefix_caching;
  c.async_scheduling = w.async_scheduling;
  auto fake = std::make_shared<FakeBackend>(o);
  Engine engine(fake, c);

  std::vector<std::vector<int32_t>> families(5);
  for (auto& f : families)
    for (int i = 0; i < 48; ++i) f.push_back(1 + int32_t(rng() % 47));

  struct Tracked {
    Req req;
    std::shared_ptr<RequestStream> stream;
    RequestEvent got;
    int finals = 0;
    bool abort_sent = false;
  };
  std::vector<Tracked> all;
  all.reserve(size_t(w.requests));
  auto drain = [&](Tracked& t) {
    for (auto& ev : t.stream->drain()) {
      ASSERT_EQ(t.finals, 0) << "event after the final one";
      t.finals += ev.finished();
      merge_event(t.got, std::move(ev));
    }
  };
  int steps = 0;
  while (int(all.size()) < w.requests || engine.num_live_requests() > 0) {
    // Arrivals in bursts.
    if (int(all.size()) < w.requests && rng() % 4 == 0) {
      for (int k = int(rng() % 6); k >= 0 && int(all.size()) < w.requests; --k) {
        Req r;
        const int32_t len = 1 + int32_t(rng() % 90);
        const auto& fam = families[rng() % families.size()];
        const int32_t shared = rng() % 3 ? std::min<int32_t>(len, int32_t(rng() % 48)) : 0;
        r.prompt.assign(fam.begin(), fam.begin() + shared);
        while (int32_t(r.prompt.size()) < len) r.prompt.push_back(1 + int32_t(rng() % 47));
        r.sampling.temperature = rng() % 3 ? 1.0f : 0.0f;
        r.sampling.top_k = rng() % 2 ? 8 : 0;
        if (rng() % 5 == 0 && w.penalties) r.sampling.frequency_penalty = 0.7f;
        r.seed = rng();
        r.max_tokens = 1 + int32_t(rng() % 50);
        r.ignore_eos = rng() % 4 == 0;
        r.priority = int32_t(rng() % 3);
        Tracked t;
        t.req = r;
        t.stream = engine.submit(r.spec());
        all.push_back(std::move(t));
      }
    }
    // Aborts from time to time, of live or finished requests.
    if (!all.empty() && rng() % 7 == 0) {
      Tracked& t = all[rng() % all.size()];
      engine.abort(t.stream->id());
      t.abort_sent = true;
    }
    engine.step();
    ++steps;
    ASSERT_NO_THROW(engine.check_invariants()) << "step " << steps;
    EXPECT_LE(fake->max_batch_tokens(), c.max_num_batched_tokens);
    if (steps % 16 == 0)
      for (auto& t : all) drain(t);
  }
  for (auto& t : all) drain(t);

  const EngineMetrics m = engine.metrics();
  EXPECT_EQ(m.kv_full_pages_used, 0);
  EXPECT_EQ(m.kv_sliding_pages_used, 0);
  EXPECT_EQ(m.requests_finished + m.requests_aborted, w.requests);
  EXPECT_LE(fake->max_batch_seqs(), c.max_num_seqs);
  int aborted = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    Tracked& t = all[i];
    ASSERT_EQ(t.finals, 1) << "request " << i;
    const RequestEvent alone = test::run_alone(t.req, o);
    if (t.got.finish == FinishReason::kAbort) {
      ++aborted;
      ASSERT_TRUE(t.abort_sent);
      ASSERT_LE(t.got.token_ids.size(), alone.token_ids.size());
      ASSERT_TRUE(std::equal(t.got.token_ids.begin(), t.got.token_ids.end(), alone.token_ids.begin()))
          << "request " << i;
    } else {
      ASSERT_EQ(t.got.token_ids, alone.token_ids) << "request " << i;
      ASSERT_EQ(t.got.finish, alone.finish) << "request " << i;
    }
    ASSERT_EQ(t.got.usage.completion_tokens, int32_t(t.got.token_ids.size()));
  }
  // The workload must have exercised what it is meant to.
  EXPECT_GT(aborted, 0);
  EXPECT_GT(m.preemptions, 0);
  if (w.prefix_caching) {
    EXPECT_GT(m.prefix_hit_tokens, 0);
  }
  if (w.async_scheduling) {
    // Steps planned ahead stop for preemptions: most of them in these tight pools.
    EXPECT_GT(fake->num_continued_steps(), steps / 5);
  } else {
    EXPECT_EQ(fake->num_continued_steps(), 0);
  }
  RecordProperty("steps", steps);
  std::printf(
      "%s: %d requests, %d steps (%lld launched while the one before ran), %d aborted, %lld "
      "preemptions, prefix hit rate %.2f\n",
      w.name, w.requests, steps, static_cast<long long>(fake->num_continued_steps()), aborted,
      static_cast<long long>(m.preemptions), m.prefix_hit_rate());
}

INSTANTIATE_TEST_SUITE_P(
    Workloads, EngineProperty,
    ::testing::Values(
        Workload{"window8_page4", 4, 8, 160, 48, 16, 64, true, 2000, 1},
        Workload{"no_sliding_page4", 4, 0, 160, 0, 16, 64, true, 1000, 2},
        Workload{"window5_page3_no_cache", 3, 5, 200, 40, 8, 32, false, 600, 3},
        Workload{"window16_page8_tight", 8, 16, 40, 12, 32, 128, true, 600, 4},
        Workload{"window8_page4_async", 4, 8, 160, 48, 16, 64, true, 2000, 5, true, false},
        Workload{"window16_page8_tight_async", 8, 16, 40, 12, 32, 128, true, 600, 6, true, false},
        Workload{"window5_page3_no_cache_async", 3, 5, 200, 40, 8, 32, false, 600, 7, true, true}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace orchid::engine
