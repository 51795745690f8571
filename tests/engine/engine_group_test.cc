// A data-parallel group of engines behind one ServingEngine: disjoint request ids that name their engine,
// requests spread to the least loaded engine, aborts routed by id, every request answered exactly as by one
// engine alone, summed metrics, and the smallest max_model_len.
#include "engine/engine_group.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

#include "core/error.h"
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

}  // namespace
}  // namespace orchid::engine
