// The start-up warm-up (runtime/warm_up.h) on the engine's checking stand-in backend: every batch it runs is
// well formed (the fake refuses bad layouts, pages and tokens), batch 1 comes through a prompt and decode
// steps, and every other graph batch size the backend names gets one decode step, greedy and sampled, as far
// as --warmup-max-batch and the KV pools allow; the backend's longer warm-up prompts come first, as far as
// one step and the pools hold them.
#include "runtime/warm_up.h"

#include <gtest/gtest.h>

#include <vector>

#include "engine/testing/fake_backend.h"

namespace orchid::engine::testing {
namespace {

// The fake with decode graphs of the given batch sizes, recording each step's sequence count.
class GraphedFake : public FakeBackend {
 public:
  GraphedFake(FakeBackendOptions options, std::vector<int32_t> batches)
      : FakeBackend(options), batches_(std::move(batches)) {}
  std::vector<int32_t> decode_graph_batches() const override { return batches_; }
  std::vector<int32_t> prefill_warm_up_lengths() const override { return prefill_lengths; }
  runtime::StepOutput forward(const runtime::StepBatch& batch) override {
    steps.push_back(int32_t(batch.seqs.size()));
    step_tokens.push_back(int32_t(batch.tokens.size()));
    return FakeBackend::forward(batch);
  }
  std::vector<int32_t> steps, step_tokens;
  std::vector<int32_t> prefill_lengths;

 private:
  std::vector<int32_t> batches_;
};

FakeBackendOptions options() {
  FakeBackendOptions o;
  o.check_sample_index = false;  // the warm-up's sequences start over with each sampling mode
  return o;
}

// Per sampling mode: the prompt and three decode steps of one sequence, then one step of each larger size.
std::vector<int32_t> expected_steps(const std::vector<int32_t>& larger) {
  std::vector<int32_t> one = {1, 1, 1, 1};
  one.insert(one.end(), larger.begin(), larger.end());
  std::vector<int32_t> both = one;
  both.insert(both.end(), one.begin(), one.end());
  return both;
}

TEST(WarmUp, OneDecodeStepOfEveryGraphBatchSizeInBothSamplingModes) {
  GraphedFake fake(options(), {1, 2, 4, 8, 16, 32, 64, 128, 256});
  EXPECT_GE(runtime::warm_up(fake), 0.0);
  // 256 sequences need 256 sliding pages; the fake's pool has 128.
  EXPECT_EQ(fake.steps, expected_steps({2, 4, 8, 16, 32, 64, 128}));
}

TEST(WarmUp, StopsAtTheLargestBatchAsked) {
  GraphedFake fake(options(), {1, 2, 4, 8, 16, 32, 64, 128, 256});
  runtime::warm_up(fake, 8);
  EXPECT_EQ(fake.steps, expected_steps({2, 4, 8}));
}

TEST(WarmUp, ABackendWithoutGraphsWarmsBatchOneOnly) {
  GraphedFake fake(options(), {});
  runtime::warm_up(fake);
  EXPECT_EQ(fake.steps, expected_steps({}));
}

TEST(WarmUp, LongerPromptsFirstAsFarAsThePoolsHoldThem) {
  GraphedFake fake(options(), {1, 2});
  // The fake's pools: 512 full pages and 128 sliding pages of 4 tokens; a one-sequence chunk needs a
  // sliding page for each of its pages (one spare), so 508 tokens fit: 1024 and 4096 are cut to that, once.
  // 100 is below the usual prompt.
  fake.prefill_lengths = {100, 256, 1024, 4096};
  runtime::warm_up(fake);
  std::vector<int32_t> with_long = {1, 1};
  const auto usual = expected_steps({2});
  with_long.insert(with_long.end(), usual.begin(), usual.end());
  EXPECT_EQ(fake.steps, with_long);
  ASSERT_GE(fake.step_tokens.size(), 3u);
  EXPECT_EQ(fake.step_tokens[0], 256);
  EXPECT_EQ(fake.step_tokens[1], 508);
  EXPECT_EQ(fake.step_tokens[2], 128);  // then the usual 128-token prompt
}

TEST(WarmUp, APoolShorterThanThePromptShortensIt) {
  FakeBackendOptions o = options();
  o.kv.num_full_pages = 10;  // 40 tokens: a 36-token prompt and its three decode steps
  GraphedFake fake(o, {1});
  fake.prefill_lengths = {1024};
  runtime::warm_up(fake);
  ASSERT_FALSE(fake.step_tokens.empty());
  EXPECT_EQ(fake.step_tokens[0], 36);
  EXPECT_EQ(fake.steps, expected_steps({}));
}

TEST(WarmUp, PromptsStayWithinTheLongestSequenceAsked) {
  GraphedFake fake(options(), {1});
  fake.prefill_lengths = {256};
  runtime::warm_up(fake, 1, 64);  // e.g. bench prefill --input-lens 32,63: --max-model-len 64
  ASSERT_FALSE(fake.step_tokens.empty());
  EXPECT_EQ(fake.step_tokens[0], 60);  // one 60-token prompt (and three decode steps), no 256-token one
  EXPECT_EQ(fake.steps, expected_steps({}));
  EXPECT_EQ(runtime::longest_warm_up_prompt(fake, 64), 60);
  EXPECT_EQ(runtime::longest_warm_up_prompt(fake), 256);
}

}  // namespace
}  // namespace orchid::engine::testing
