// Token constraints in the engine (structured outputs): the mask a constraint writes decides what is drawn,
// the constraint hears every token, a failing constraint fails only its own request, and a backend that does
// not apply masks refuses constrained requests.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <random>
#include <set>
#include <thread>

#include "core/error.h"
#include "engine/engine.h"
#include "runtime/sampler.h"
#include "test_util.h"

namespace orchid::engine {
namespace {

using test::fake_options;
using test::Harness;
using test::Req;

// Allows one token per step, from a script (then the script's last token forever); records what it heard.
class ScriptedConstraint : public TokenConstraint {
 public:
  explicit ScriptedConstraint(std::vector<int32_t> script, std::vector<int32_t>* heard,
                              bool throw_at_3 = false)
      : script_(std::move(script)), heard_(heard), throw_at_3_(throw_at_3) {}
  void fill_mask(std::span<uint32_t> mask, int32_t remaining) override {
    if (throw_at_3_ && heard_->size() == 3) throw std::runtime_error("grammar state lost");
    std::fill(mask.begin(), mask.end(), 0u);
    const int32_t t = script_[std::min(heard_->size(), script_.size() - 1)];
    mask[size_t(t) / 32] |= 1u << (t % 32);
    if (remaining_) remaining_->push_back(remaining);
  }
  bool accept(int32_t token) override {
    heard_->push_back(token);
    return true;
  }
  std::vector<int32_t>* remaining_ = nullptr;  // where fill_mask records `remaining`, if set

 private:
  std::vector<int32_t> script_;
  std::vector<int32_t>* heard_;
  bool throw_at_3_;
};

std::vector<int32_t> collect(RequestStream& s, RequestEvent* last) {
  std::vector<int32_t> ids;
  while (auto ev = s.poll()) {
    ids.insert(ids.end(), ev->token_ids.begin(), ev->token_ids.end());
    *last = std::move(*ev);
  }
  return ids;
}

TEST(EngineConstraint, MaskDecidesEveryTokenAcrossPreemptions) {
  // A small pool: requests preempt each other and recompute, and their constraints must not notice.
  Harness h(fake_options(/*full_pages=*/24, /*sliding_pages=*/24), {});
  std::mt19937 rng(3);
  struct Run {
    std::vector<int32_t> script, heard;
    std::shared_ptr<RequestStream> stream;
  };
  std::vector<Run> runs(8);
  for (auto& r : runs) {
    for (int i = 0; i < 24; ++i) r.script.push_back(1 + int32_t(rng() % 63));
    Req q;
    q.prompt = test::tokens(rng, 10);
    q.sampling.temperature = 1.0f;
    q.ignore_eos = true;
    q.max_tokens = 24;
    RequestSpec spec = q.spec();
    spec.constraint = std::make_unique<ScriptedConstraint>(r.script, &r.heard);
    r.stream = h.engine.submit(std::move(spec));
  }
  h.run();
  EXPECT_GT(h.engine.metrics().preemptions, 0);
  for (auto& r : runs) {
    RequestEvent last;
    EXPECT_EQ(collect(*r.stream, &last), r.script);
    EXPECT_EQ(r.heard, r.script);
    EXPECT_EQ(last.finish, FinishReason::kLength);
  }
}

TEST(EngineConstraint, RemainingCountsDownToTheLastToken) {
  Harness h(fake_options(), {});
  std::vector<int32_t> heard;
  Req q;
  q.prompt = {3, 4, 5};
  q.ignore_eos = true;
  q.max_tokens = 6;
  RequestSpec spec = q.spec();
  std::vector<int32_t> remaining;
  auto c = std::make_unique<ScriptedConstraint>(std::vector<int32_t>{7}, &heard);
  c->remaining_ = &remaining;  // the engine drops the constraint with its finished request
  spec.constraint = std::move(c);
  auto stream = h.engine.submit(std::move(spec));
  h.run();
  EXPECT_EQ(remaining, (std::vector<int32_t>{6, 5, 4, 3, 2, 1}));
}

TEST(EngineConstraint, AFailingConstraintFailsOnlyItsRequest) {
  Harness h(fake_options(), {});
  std::vector<int32_t> heard_bad, heard_good;
  Req q;
  q.prompt = {3, 4, 5};
  q.ignore_eos = true;
  q.max_tokens = 8;
  RequestSpec bad = q.spec();
  bad.constraint =
      std::make_unique<ScriptedConstraint>(std::vector<int32_t>{9}, &heard_bad, /*throw_at_3=*/true);
  RequestSpec good = q.spec();
  good.constraint = std::make_unique<ScriptedConstraint>(std::vector<int32_t>{11}, &heard_good);
  auto bad_stream = h.engine.submit(std::move(bad));
  auto good_stream = h.engine.submit(std::move(good));
  h.run();
  RequestEvent last;
  collect(*bad_stream, &last);
  EXPECT_EQ(last.finish, FinishReason::kError);
  EXPECT_NE(last.error.find("grammar state lost"), std::string::npos) << last.error;
  EXPECT_EQ(collect(*good_stream, &last), std::vector<int32_t>(8, 11));
  EXPECT_EQ(last.finish, FinishReason::kLength);
}

class MaskBlindBackend : public testing::FakeBackend {
 public:
  using FakeBackend::FakeBackend;
  bool applies_token_masks() const override { return false; }
};

TEST(EngineConstraint, BackendsWithoutMasksRefuseConstrainedRequests) {
  auto backend = std::make_shared<MaskBlindBackend>(fake_options());
  Engine engine(backend, {});
  std::vector<int32_t> heard;
  Req q;
  q.prompt = {1, 2};
  RequestSpec spec = q.spec();
  spec.constraint = std::make_unique<ScriptedConstraint>(std::vector<int32_t>{3}, &heard);
  try {
    engine.submit(std::move(spec));
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("structured outputs"), std::string::npos);
  }
  Req plain;
  plain.prompt = {1, 2};
  EXPECT_NO_THROW(engine.submit(plain.spec()));
}

TEST(EngineConstraint, MasksAreComputedWhileTheBackendRuns) {
  // The fake backend sleeps (a forward) before waiting for the masks; a constraint that takes as long
  // must not double the step.
  class Slow : public TokenConstraint {
   public:
    void fill_mask(std::span<uint32_t> mask, int32_t) override {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      std::fill(mask.begin(), mask.end(), ~0u);
    }
    bool accept(int32_t) override { return true; }
  };
  auto o = fake_options();
  o.simulate = false;
  o.step_time = std::chrono::milliseconds(20);
  Harness h(o, {});
  Req q;
  q.prompt = {1, 2, 3};
  q.ignore_eos = true;
  q.max_tokens = 10;
  RequestSpec spec = q.spec();
  spec.constraint = std::make_unique<Slow>();
  h.engine.submit(std::move(spec));
  const auto t0 = std::chrono::steady_clock::now();
  h.run();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // 10 steps (the prefill samples the first token) of 20 ms each when overlapped, 0.4 s if serial.
  EXPECT_LT(seconds, 0.34);
}

}  // namespace
}  // namespace orchid::engine
