// Asynchronous scheduling (EngineConfig::async_scheduling): the engine launches decode step N+1 before it
// reads step N, over a fake backend that computes a step only when it is collected (a device behind the
// host). Every request must get the tokens it gets alone and synchronously, pages freed while a launched
// step still holds them must not be read wrongly, and steady decoding must actually be pipelined.
#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "engine/engine.h"
#include "engine/token_constraint.h"
#include "test_util.h"

namespace orchid::engine {
namespace {

using test::Req;
using testing::FakeBackendOptions;

FakeBackendOptions deferred_options(int32_t full_pages = 512, int32_t sliding_pages = 128) {
  FakeBackendOptions o = test::fake_options(full_pages, sliding_pages);
  o.deferred = true;
  return o;
}

EngineConfig async_config(int32_t max_num_seqs = 64) {
  EngineConfig c;
  c.async_scheduling = true;
  c.max_num_seqs = max_num_seqs;
  c.max_num_batched_tokens = 1024;
  return c;
}

// Requests that end in every way a decode can: max_tokens, a stop id (EOS), a stop string, min_tokens
// holding the stop ids back, greedy and seeded sampling.
std::vector<Req> mixed_requests(std::mt19937& rng, int n) {
  std::vector<Req> reqs;
  for (int i = 0; i < n; ++i) {
    Req r;
    r.prompt = test::tokens(rng, 1 + int32_t(rng() % 40));
    r.sampling.temperature = rng() % 3 ? 1.0f : 0.0f;
    r.sampling.top_k = rng() % 2 ? 8 : 0;
    r.seed = rng();
    r.max_tokens = 1 + int32_t(rng() % 48);
    r.ignore_eos = rng() % 3 == 0;
    r.min_tokens = rng() % 4 == 0 ? std::min(r.max_tokens, int32_t(rng() % 8)) : 0;
    if (rng() % 4 == 0) {
      r.decoder = true;
      r.stop_strings = {test::ToyDecoder::piece(1 + int32_t(rng() % 63))};
    }
    reqs.push_back(r);
  }
  return reqs;
}

void expect_alone_tokens(const std::vector<Req>& reqs, const std::vector<RequestEvent>& got,
                         const FakeBackendOptions& o) {
  for (size_t i = 0; i < reqs.size(); ++i) {
    FakeBackendOptions plain = o;
    plain.deferred = false;
    const RequestEvent alone = test::run_alone(reqs[i], plain);
    EXPECT_EQ(got[i].token_ids, alone.token_ids) << "request " << i;
    EXPECT_EQ(got[i].text, alone.text) << "request " << i;
    EXPECT_EQ(got[i].finish, alone.finish) << "request " << i;
    EXPECT_EQ(got[i].usage.completion_tokens, int32_t(alone.token_ids.size())) << "request " << i;
  }
}

// Submits every request, runs the engine to the end, and checks each request got its alone tokens.
void run_expecting_alone_tokens(test::Harness& h, const std::vector<Req>& reqs) {
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const Req& r : reqs) streams.push_back(h.engine.submit(r.spec()));
  h.run();
  std::vector<RequestEvent> got;
  for (auto& s : streams) got.push_back(s->wait_all());
  expect_alone_tokens(reqs, got, h.options);
}

TEST(AsyncScheduling, SteadyDecodingIsPipelinedAndGivesTheTokensOfEachRequestAlone) {
  std::mt19937 rng(11);
  const std::vector<Req> reqs = mixed_requests(rng, 48);
  test::Harness h(deferred_options(), async_config());
  run_expecting_alone_tokens(h, reqs);
  // After the prompts, every step but the one that drains the pipeline at each end is launched ahead.
  EXPECT_GT(h.fake->num_continued_steps(), h.fake->num_steps() * 3 / 4)
      << h.fake->num_continued_steps() << " of " << h.fake->num_steps();
}

TEST(AsyncScheduling, PagesFreedWhileALaunchedStepHoldsThemAreNotReadWrongly) {
  // A pool so small that the pages of sequences ending by their token go straight to the next ones, and
  // sequences are preempted: the fake backend checks every slot it reads holds the position asked for.
  std::mt19937 rng(12);
  std::vector<Req> reqs = mixed_requests(rng, 40);
  const FakeBackendOptions o = deferred_options(48, 24);
  test::Harness h(o, async_config(16));
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const Req& r : reqs) streams.push_back(h.engine.submit(r.spec()));
  h.run();
  std::vector<RequestEvent> got;
  for (auto& s : streams) got.push_back(s->wait_all());
  expect_alone_tokens(reqs, got, o);
  EXPECT_GT(h.fake->num_continued_steps(), 0);
  EXPECT_GT(h.engine.metrics().preemptions, 0);
}

TEST(AsyncScheduling, ArrivalsAndAbortsWhileAStepIsLaunched) {
  std::mt19937 rng(13);
  std::vector<Req> reqs = mixed_requests(rng, 24);
  for (Req& r : reqs) {
    r.max_tokens = 40;
    r.ignore_eos = true;
    r.stop_strings.clear();
  }
  test::Harness h(deferred_options(), async_config());
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (size_t i = 0; i < 12; ++i) streams.push_back(h.engine.submit(reqs[i].spec()));
  for (int k = 0; k < 6; ++k) {
    ASSERT_TRUE(h.engine.step());
    h.engine.check_invariants();
  }
  h.engine.abort(streams[3]->id());  // while a step is launched
  const int64_t before = h.fake->num_continued_steps();
  for (size_t i = 12; i < reqs.size(); ++i) {
    streams.push_back(h.engine.submit(reqs[i].spec()));
    ASSERT_TRUE(h.engine.step());
    h.engine.check_invariants();
  }
  // Each arrival was admitted into a step planned ahead: the pipeline did not stop for it.
  EXPECT_EQ(h.fake->num_continued_steps() - before, int64_t(reqs.size() - 12));
  h.run();
  std::vector<RequestEvent> got;
  for (auto& s : streams) got.push_back(s->wait_all());
  for (size_t i = 0; i < reqs.size(); ++i) {
    const RequestEvent alone = test::run_alone(reqs[i], test::fake_options());
    if (i == 3) {
      EXPECT_EQ(got[i].finish, FinishReason::kAbort);
      ASSERT_LT(got[i].token_ids.size(), alone.token_ids.size());
      EXPECT_TRUE(std::equal(got[i].token_ids.begin(), got[i].token_ids.end(), alone.token_ids.begin()));
    } else {
      EXPECT_EQ(got[i].token_ids, alone.token_ids) << "request " << i;
    }
  }
  EXPECT_GT(h.fake->num_continued_steps(), 0);
}

TEST(AsyncScheduling, PenalizedRequestsTakeTheirHistoryFromTheLaunchedStep) {
  // A penalty's history ends with the token the launched step draws (StepBatch::history_from_previous):
  // with a wrong history the draws differ from the request's alone.
  std::mt19937 rng(14);
  std::vector<Req> reqs = mixed_requests(rng, 12);
  for (Req& r : reqs) {
    r.sampling.frequency_penalty = 1.5f;
    r.sampling.presence_penalty = 0.5f;
    r.sampling.repetition_penalty = 1.3f;
  }
  test::Harness h(deferred_options(), async_config());
  run_expecting_alone_tokens(h, reqs);
  EXPECT_GT(h.fake->num_continued_steps(), h.fake->num_steps() / 2);
}

// Allows only the successor of the last token it heard (1..63, wrapping): every mask follows the draw
// before it, so a mask computed before that draw was heard gives another token.
class Successor : public TokenConstraint {
 public:
  explicit Successor(int32_t first) : next_(first) {}
  void fill_mask(std::span<uint32_t> mask, int32_t) override {
    std::fill(mask.begin(), mask.end(), 0u);
    mask[size_t(next_) / 32] |= 1u << (next_ % 32);
  }
  bool accept(int32_t token) override {
    if (token != next_) return false;
    next_ = next_ % 63 + 1;
    return true;
  }

 private:
  int32_t next_;
};

TEST(AsyncScheduling, StructuredOutputsGetEachMaskAfterTheDrawBeforeIt) {
  // The masks of a step planned ahead are computed once the launched step is read and handed over before
  // the next launch (Backend::supply_masks): over the deferred fake and over the default launch(), which
  // computes the step when its masks come.
  for (const bool deferred : {true, false}) {
    FakeBackendOptions o = deferred_options();
    o.deferred = deferred;
    test::Harness h(o, async_config());
    Req plain;
    plain.prompt = {5, 6, 7};
    plain.max_tokens = 20;
    plain.ignore_eos = true;
    plain.seed = 7;
    std::vector<std::shared_ptr<RequestStream>> constrained;
    auto a = h.engine.submit(plain.spec());
    for (int32_t i = 0; i < 6; ++i) {
      Req r = plain;
      r.prompt.push_back(10 + i);
      r.max_tokens = 8 + 3 * i;
      RequestSpec spec = r.spec();
      spec.constraint = std::make_unique<Successor>(1 + 9 * i);
      constrained.push_back(h.engine.submit(std::move(spec)));
    }
    h.run();
    for (int32_t i = 0; i < 6; ++i) {
      const RequestEvent ev = constrained[size_t(i)]->wait_all();
      ASSERT_EQ(ev.finish, FinishReason::kLength) << ev.error;
      std::vector<int32_t> want;
      for (int32_t t = 0, next = 1 + 9 * i; t < 8 + 3 * i; ++t, next = next % 63 + 1) want.push_back(next);
      EXPECT_EQ(ev.token_ids, want) << "request " << i;
    }
    EXPECT_EQ(a->wait_all().token_ids, test::run_alone(plain, test::fake_options()).token_ids);
    EXPECT_GT(h.fake->num_continued_steps(), 10);
  }
}

TEST(AsyncScheduling, StructuredOutputsRunOneStepAtATimeWhereMasksMustComeFirst) {
  // A backend that needs the masks when a step is launched (the CUDA backend, for now).
  class EarlyMasks : public testing::FakeBackend {
   public:
    using FakeBackend::FakeBackend;
    bool accepts_late_masks() const override { return false; }
  };
  FakeBackendOptions o = deferred_options();
  auto fake = std::make_shared<EarlyMasks>(o);
  Engine engine(fake, async_config());
  Req plain;
  plain.prompt = {5, 6, 7};
  plain.max_tokens = 12;
  plain.ignore_eos = true;
  plain.seed = 7;
  RequestSpec spec = plain.spec();
  spec.constraint = std::make_unique<Successor>(30);
  auto b = engine.submit(std::move(spec));
  auto a = engine.submit(plain.spec());
  engine.run_until_idle();
  std::vector<int32_t> want;
  for (int32_t t = 0, next = 30; t < 12; ++t, next = next % 63 + 1) want.push_back(next);
  EXPECT_EQ(b->wait_all().token_ids, want);
  EXPECT_EQ(a->wait_all().token_ids, test::run_alone(plain, test::fake_options()).token_ids);
  EXPECT_EQ(fake->num_continued_steps(), 0);
}

TEST(AsyncScheduling, OffWithSpeculativeDecoding) {
  EngineConfig c = async_config();
  c.speculative.method = "ngram";
  c.speculative.num_speculative_tokens = 2;
  test::Harness h(deferred_options(), c);
  std::mt19937 rng(15);
  std::vector<Req> reqs = mixed_requests(rng, 6);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const Req& r : reqs) streams.push_back(h.engine.submit(r.spec()));
  h.run();
  EXPECT_EQ(h.fake->num_continued_steps(), 0);
  for (auto& s : streams) EXPECT_NE(s->wait_all().finish, FinishReason::kError);
}

TEST(AsyncScheduling, StoppingTheLoopWithAStepLaunchedFreesEverything) {
  FakeBackendOptions o = deferred_options(20000, 128);
  o.max_position = 8000;  // far more decoding than the test waits for
  auto fake = std::make_shared<testing::FakeBackend>(o);
  Engine engine(fake, async_config());
  std::mt19937 rng(16);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 16; ++i) {
    Req r;
    r.prompt = test::tokens(rng, 8);
    r.max_tokens = 1 << 20;
    r.ignore_eos = true;
    streams.push_back(engine.submit(r.spec()));
  }
  engine.start();
  while (fake->num_continued_steps() < 20) std::this_thread::yield();
  engine.stop();
  for (auto& s : streams) {
    const RequestEvent ev = s->wait_all();
    EXPECT_EQ(ev.finish, FinishReason::kAbort);
    EXPECT_GT(ev.token_ids.size(), 0u);
  }
  // The launched step was read before the pages went back: every page is free and accounted for.
  EXPECT_NO_THROW(engine.check_invariants());
}

}  // namespace
}  // namespace orchid::engine
