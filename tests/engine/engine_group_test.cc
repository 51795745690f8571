// A data-parallel group of engines behind one ServingEngine: disjoint request ids that name their engine,
// requests spread to the least loaded engine, aborts routed by id, every request answered exactly as by one
// engine alone, summed metrics, and the smallest max_model_len. Engines in lockstep (backends whose
// forward() calls must run together, here fakes meeting at a barrier in every forward): every engine calls
// forward the same number of times, idle ones with empty batches, nothing runs while all are idle, a
// request to an idle engine wakes the group, a refused batch fails only its requests, a failing engine and
// stop() end the whole group without hanging.
#include "engine/engine_group.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "core/error.h"
#include "runtime/communicator.h"
#include "test_util.h"

namespace orchid::engine {
namespace {

using test::fake_options;
using test::Req;
using test::run_alone;
using test::tokens;
using testing::FakeBackend;

std::shared_ptr<EngineGroup> make_group(int n, int32_t max_model_len = 0) {
  std::vector<std::shared_ptr<Engine>> engines;
  for (int i = 0; i < n; ++i) {
    EngineConfig c;
    c.seed = 5;
    c.max_model_len = max_model_len ? max_model_len + i : 0;
    engines.push_back(std::make_shared<Engine>(std::make_shared<FakeBackend>(fake_options()),
                                               EngineGroup::group_engine_config(c, i, n)));
  }
  return std::make_shared<EngineGroup>(std::move(engines));
}

TEST(EngineGroup, SpreadsRequestsAndAnswersAsOneEngine) {
  const int n = 3;
  auto group = make_group(n);
  std::mt19937 rng(11);
  std::vector<Req> reqs;
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int r = 0; r < 30; ++r) {
    Req q;
    q.prompt = tokens(rng, 5 + r % 7);
    q.sampling.temperature = 0;
    q.ignore_eos = true;
    q.max_tokens = 6 + r % 5;
    reqs.push_back(q);
    streams.push_back(group->submit(q.spec()));
  }
  // Submitted before any engine runs: the outstanding counts only grow, so the least loaded engine takes
  // turns and each holds 10.
  for (size_t i = 0; i < group->size(); ++i) EXPECT_EQ(group->engine(i).outstanding(), 10) << "engine " << i;
  EXPECT_EQ(group->outstanding(), 30);
  for (size_t i = 0; i < group->size(); ++i) group->engine(i).start();
  std::set<int64_t> ids;
  std::map<int64_t, int> per_engine;
  for (size_t r = 0; r < streams.size(); ++r) {
    const RequestEvent all = streams[r]->wait_all();
    const RequestEvent want = run_alone(reqs[r], fake_options());
    EXPECT_EQ(all.token_ids, want.token_ids) << "request " << r;
    EXPECT_EQ(all.finish, FinishReason::kLength);
    EXPECT_TRUE(ids.insert(streams[r]->id()).second) << "duplicate id " << streams[r]->id();
    ++per_engine[(streams[r]->id() - 1) % n];
  }
  EXPECT_EQ(per_engine.size(), size_t(n));  // ids name their engine
  for (auto [engine, count] : per_engine) EXPECT_EQ(count, 10) << "engine " << engine;
  group->stop();  // joins the loops: the last step's metrics are in
  const EngineMetrics m = group->metrics();
  EXPECT_EQ(m.requests_submitted, 30);
  EXPECT_EQ(m.requests_finished, 30);
  EXPECT_EQ(group->outstanding(), 0);
}

TEST(EngineGroup, AbortReachesTheEngineThatHasTheRequest) {
  auto group = make_group(2);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int r = 0; r < 4; ++r) {
    Req q;
    q.prompt = {1, 2, 3};
    q.ignore_eos = true;
    q.max_tokens = 100000;  // would run to the context's end unless aborted
    streams.push_back(group->submit(q.spec()));
  }
  // The aborts are routed before the engines start, so none can reach its length limit first (a loaded
  // machine once let a fast fake engine do that between the submits and the aborts).
  for (auto& s : streams) group->abort(s->id());
  for (size_t i = 0; i < group->size(); ++i) group->engine(i).start();
  for (auto& s : streams) EXPECT_EQ(s->wait_all().finish, FinishReason::kAbort) << s->id();
  group->stop();
  EXPECT_EQ(group->metrics().requests_aborted, 4);
}

TEST(EngineGroup, SmallestContextAndConfigChecks) {
  auto group = make_group(3, 200);
  EXPECT_EQ(group->max_model_len(), 200);
  EXPECT_EQ(group->vocab_size(), fake_options().vocab_size);
  std::vector<std::shared_ptr<Engine>> bad;
  bad.push_back(std::make_shared<Engine>(std::make_shared<FakeBackend>(fake_options()), EngineConfig{}));
  bad.push_back(std::make_shared<Engine>(std::make_shared<FakeBackend>(fake_options()), EngineConfig{}));
  EXPECT_THROW(EngineGroup{bad}, InternalError);  // ids would collide
}

// A fake backend stepping in lockstep with the others of its group: every forward() meets theirs at a
// barrier (as a shared MoE's collectives would: a missing call hangs the group), and counts its calls.
class LockstepFake final : public FakeBackend {
 public:
  LockstepFake(testing::FakeBackendOptions o, runtime::LocalCommunicator* barrier)
      : FakeBackend(o), barrier_(barrier) {}
  int32_t lockstep_replicas() const override { return barrier_->size(); }
  runtime::StepOutput forward(const runtime::StepBatch& b) override {
    const int64_t call = ++calls;
    if (b.seqs.empty()) ++empty;
    if (call == fail_at) {
      barrier_->abort();  // as a failing rank does: the others' collectives throw instead of waiting
      ORCHID_CHECK(false, "replica failed in its step {} (test)", call);
    }
    barrier_->barrier();
    if (b.seqs.empty()) return {};
    return FakeBackend::forward(b);  // may refuse the batch (reject_token), after the barrier
  }
  std::atomic<int64_t> calls{0}, empty{0};
  int64_t fail_at = -1;

 private:
  runtime::LocalCommunicator* barrier_;
};

struct LockstepGroup {
  explicit LockstepGroup(int n, testing::FakeBackendOptions o = fake_options())
      : barriers(runtime::make_local_group(n)) {
    auto round = std::make_shared<StepRound>(n);
    std::vector<std::shared_ptr<Engine>> engines;
    for (int i = 0; i < n; ++i) {
      fakes.push_back(std::make_shared<LockstepFake>(o, barriers[size_t(i)].get()));
      EngineConfig c;
      c.seed = 5;
      engines.push_back(
          std::make_shared<Engine>(fakes.back(), EngineGroup::group_engine_config(c, i, n, round)));
    }
    group = std::make_shared<EngineGroup>(std::move(engines));
  }
  void start() {
    for (size_t i = 0; i < group->size(); ++i) group->engine(i).start();
  }
  // Every engine's forward calls, once they stop changing (the group is idle).
  std::vector<int64_t> settled_calls() {
    std::vector<int64_t> before, now;
    for (int tries = 0; tries < 100; ++tries) {
      now.clear();
      for (auto& f : fakes) now.push_back(f->calls);
      if (now == before) return now;
      before = now;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ADD_FAILURE() << "the engines never stopped stepping";
    return now;
  }
  std::vector<std::unique_ptr<runtime::LocalCommunicator>> barriers;
  std::vector<std::shared_ptr<LockstepFake>> fakes;
  std::shared_ptr<EngineGroup> group;
};

// The stream's events merged, failing (instead of hanging) when it does not end within 60 s.
RequestEvent wait_all_within(RequestStream& s) {
  RequestEvent all;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!all.finished()) {
    if (std::chrono::steady_clock::now() > deadline) {
      ADD_FAILURE() << "request " << s.id() << " did not end";
      break;
    }
    if (auto ev = s.next(std::chrono::milliseconds(100))) merge_event(all, std::move(*ev));
  }
  return all;
}

Req greedy_req(std::mt19937& rng, int r, int32_t max_tokens) {
  Req q;
  q.prompt = tokens(rng, 4 + r % 9);
  q.sampling.temperature = r % 2 ? 0.0f : 0.9f;
  q.seed = uint64_t(r);
  q.ignore_eos = true;
  q.max_tokens = max_tokens;
  return q;
}

TEST(EngineGroup, LockstepEnginesStepTogether) {
  LockstepGroup g(3);
  g.start();
  std::mt19937 rng(3);
  // Engine 0 alone has work for many steps; engines 1 and 2 run empty steps beside it.
  std::vector<Req> reqs;
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int r = 0; r < 4; ++r) {
    reqs.push_back(greedy_req(rng, r, 24));
    streams.push_back(g.group->engine(0).submit(reqs.back().spec()));
  }
  for (size_t r = 0; r < streams.size(); ++r)
    EXPECT_EQ(wait_all_within(*streams[r]).token_ids, run_alone(reqs[r], fake_options()).token_ids);
  auto calls = g.settled_calls();  // and idle: no step runs while nobody has work
  EXPECT_GE(calls[0], 24);
  EXPECT_EQ(calls[1], calls[0]);
  EXPECT_EQ(calls[2], calls[0]);
  EXPECT_EQ(g.fakes[0]->empty, 0);
  EXPECT_EQ(g.fakes[1]->empty, calls[0]);
  EXPECT_EQ(g.fakes[2]->empty, calls[0]);
  EXPECT_EQ(g.group->engine(1).metrics().steps, 0);  // empty steps are not counted as steps

  // A request to an idle engine wakes the group; then requests spread over all three, staggered.
  reqs.push_back(greedy_req(rng, 4, 10));
  streams.push_back(g.group->engine(2).submit(reqs.back().spec()));
  EXPECT_EQ(wait_all_within(*streams.back()).token_ids, run_alone(reqs.back(), fake_options()).token_ids);
  // The group submits to the engine with the fewest outstanding requests (ties: the lowest). With a running
  // request held on engines 0 and 1, the next goes to engine 2 whatever the timing (short requests alone
  // may each finish before the next is submitted, on a loaded machine, and all go to engine 0).
  const Req hold = greedy_req(rng, 98, 100000);
  std::vector<std::shared_ptr<RequestStream>> held;
  for (int64_t want = 0; want < 2; ++want) {
    held.push_back(g.group->submit(hold.spec()));
    ASSERT_TRUE(held.back()->next(std::chrono::seconds(60)).has_value());  // it is running
    EXPECT_EQ((held.back()->id() - 1) % 3, want);
  }
  for (int r = 5; r < 20; ++r) {
    reqs.push_back(greedy_req(rng, r, 5 + r % 7));
    streams.push_back(g.group->submit(reqs.back().spec()));
    if (r % 5 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ((streams[5]->id() - 1) % 3, 2);
  for (size_t r = 5; r < streams.size(); ++r) {
    const RequestEvent all = wait_all_within(*streams[r]);
    EXPECT_EQ(all.token_ids, run_alone(reqs[r], fake_options()).token_ids) << "request " << r;
  }
  for (const auto& h : held) {  // aborted, or already ended at the context length
    g.group->abort(h->id());
    const FinishReason f = wait_all_within(*h).finish;
    EXPECT_TRUE(f == FinishReason::kAbort || f == FinishReason::kLength) << int(f);
  }
  calls = g.settled_calls();
  EXPECT_EQ(calls[1], calls[0]);
  EXPECT_EQ(calls[2], calls[0]);

  // Stopping the group while a request runs: it ends aborted, and nothing hangs.
  Req endless = greedy_req(rng, 99, 100000);
  auto s = g.group->engine(1).submit(endless.spec());
  ASSERT_TRUE(s->next(std::chrono::seconds(60)).has_value());  // it is running
  g.group->stop();
  EXPECT_EQ(wait_all_within(*s).finish, FinishReason::kAbort);
  EXPECT_THROW(g.group->submit(endless.spec()), Error);
  EXPECT_EQ(g.group->outstanding(), 0);
}

TEST(EngineGroup, LockstepRefusedBatchFailsOnlyItsRequests) {
  testing::FakeBackendOptions o = fake_options();
  o.reject_token = 63;
  LockstepGroup g(2, o);
  g.start();
  Req bad;
  bad.prompt = {5, 63, 7};
  bad.max_tokens = 4;
  Req good;
  good.prompt = {5, 6, 7};
  good.ignore_eos = true;
  good.max_tokens = 12;
  good.seed = 7;
  auto b = g.group->engine(0).submit(bad.spec());
  auto ok = g.group->engine(1).submit(good.spec());
  const RequestEvent refused = wait_all_within(*b);
  EXPECT_EQ(refused.finish, FinishReason::kError);
  EXPECT_NE(refused.error.find("not accepted"), std::string::npos) << refused.error;
  EXPECT_EQ(wait_all_within(*ok).token_ids, run_alone(good, fake_options()).token_ids);
  // Engine 0 carries on.
  auto again = g.group->engine(0).submit(good.spec());
  EXPECT_EQ(wait_all_within(*again).finish, FinishReason::kLength);
  g.group->stop();
}

TEST(EngineGroup, LockstepFailureEndsTheGroup) {
  LockstepGroup g(3);
  g.fakes[1]->fail_at = 6;
  std::mt19937 rng(9);
  std::vector<std::shared_ptr<RequestStream>> streams;
  // Every request in before the engines run: started first, the group could reach engine 1's failing
  // forward before this thread's last submit, which the failed engine then refuses (Engine::submit throws).
  for (int i = 0; i < 3; ++i)
    streams.push_back(g.group->engine(size_t(i)).submit(greedy_req(rng, i, 1000).spec()));
  g.start();
  for (auto& s : streams) {
    const RequestEvent all = wait_all_within(*s);
    EXPECT_EQ(all.finish, FinishReason::kError) << s->id();
    EXPECT_FALSE(all.error.empty());
  }
  EXPECT_THROW(g.group->submit(greedy_req(rng, 5, 3).spec()), Error);
  g.group->stop();
}

TEST(EngineGroup, LockstepBackendNeedsAStepRound) {
  auto barriers = runtime::make_local_group(2);
  auto fake = std::make_shared<LockstepFake>(fake_options(), barriers[0].get());
  EXPECT_THROW(Engine(fake, EngineConfig{}), InternalError);
  EngineConfig c = EngineGroup::group_engine_config(EngineConfig{}, 0, 3, std::make_shared<StepRound>(3));
  EXPECT_THROW(Engine(fake, c), InternalError);  // a round of 3 for a backend that steps with 2
}

}  // namespace
}  // namespace orchid::engine
