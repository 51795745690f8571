// Many threads submit, consume and abort at once while the loop thread runs (run it under the `asan`
// preset too). Every request ends exactly once; the ones not aborted get their alone tokens.
#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <thread>

#include "engine/engine.h"
#include "test_util.h"

namespace orchid::engine {
namespace {

using namespace std::chrono_literals;
using test::Req;
using testing::FakeBackend;
using testing::FakeBackendOptions;

TEST(EngineThreads, ConcurrentSubmitAbortAndConsume) {
  FakeBackendOptions o;
  o.kv.num_full_pages = 96;  // small: preemptions happen under load
  o.kv.num_sliding_pages = 40;
  o.max_position = 192;
  EngineConfig c;
  c.max_num_seqs = 24;
  c.max_num_batched_tokens = 96;
  Engine engine(std::make_shared<FakeBackend>(o), c);
  engine.start();

  constexpr int kThreads = 8, kPerThread = 60;
  struct Result {
    Req req;
    RequestEvent got;
    int finals = 0;
  };
  std::vector<std::vector<Result>> results(kThreads);
  std::atomic<int64_t> listener_calls{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(uint32_t(100 + t));
      for (int i = 0; i < kPerThread; ++i) {
        Result r;
        r.req.prompt.resize(1 + rng() % 40);
        for (auto& id : r.req.prompt) id = 1 + int32_t(rng() % 63);
        r.req.sampling.temperature = rng() % 2 ? 0.7f : 0.0f;
        r.req.seed = rng();
        r.req.max_tokens = 1 + int32_t(rng() % 40);
        auto stream = engine.submit(r.req.spec());
        stream->set_listener([&] { ++listener_calls; });
        const bool abort = rng() % 4 == 0;
        const bool use_poll = rng() % 2 == 0;
        int seen = 0;
        while (r.finals == 0) {
          std::optional<RequestEvent> ev = use_poll ? stream->poll() : stream->next(50ms);
          if (!ev) {
            if (use_poll) std::this_thread::sleep_for(100us);
            continue;
          }
          r.finals += ev->finished();
          merge_event(r.got, std::move(*ev));
          if (abort && ++seen == 2) engine.abort(stream->id());
        }
        // Nothing follows the final event.
        EXPECT_FALSE(stream->next(1ms).has_value());
        results[size_t(t)].push_back(std::move(r));
      }
    });
  }
  // Metrics are readable from any thread while all this runs.
  std::atomic<bool> done{false};
  std::thread reader([&] {
    while (!done) {
      const auto m = engine.metrics();
      EXPECT_LE(m.kv_full_pages_used, m.kv_full_pages_total);
      std::this_thread::sleep_for(1ms);
    }
  });
  for (auto& th : threads) th.join();
  done = true;
  reader.join();
  engine.stop();

  const auto m = engine.metrics();
  EXPECT_EQ(m.requests_finished + m.requests_aborted, kThreads * kPerThread);
  EXPECT_EQ(m.kv_full_pages_used, 0);
  EXPECT_EQ(m.kv_sliding_pages_used, 0);
  EXPECT_GT(listener_calls.load(), 0);
  int checked = 0;
  for (auto& per_thread : results) {
    for (auto& r : per_thread) {
      ASSERT_EQ(r.finals, 1);
      const RequestEvent alone = test::run_alone(r.req, o);
      if (r.got.finish == FinishReason::kAbort) {
        ASSERT_TRUE(std::equal(r.got.token_ids.begin(), r.got.token_ids.end(), alone.token_ids.begin()));
      } else {
        ASSERT_EQ(r.got.token_ids, alone.token_ids);
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, kThreads * kPerThread / 2);
}

}  // namespace
}  // namespace orchid::engine
