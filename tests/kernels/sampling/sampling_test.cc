// The GPU sampler against the host sampler (runtime/sampler.h, the reference semantics) on random rows:
// the same token, the same top-N ids, logprobs within 1e-5, for every mix of greedy, temperature, top-k,
// top-p, min-p, penalties, banned tokens, allowed-token masks and logprobs, on odd and full vocabularies,
// with ties and -inf.
#include "kernels/sampling/sampling.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <random>
#include <set>
#include <vector>

#include "runtime/sampler.h"
#include "tests/kernels/gpu_test_util.h"

namespace orchid::kernels::sampling {
namespace {

using orchid::testing::DeviceBuffer;

struct Case {
  std::vector<float> logits;  // one row
  runtime::SamplingParams params;
  int32_t sample_index = 0;
  std::vector<int32_t> prompt, output, banned;
  std::vector<uint32_t> mask;  // allowed tokens (structured outputs), ceil(vocab / 32) words; empty: all
};

enum class Shape { kNormal, kTies, kPeaked, kWithNegInf };

Case random_case(std::mt19937_64& rng, int64_t vocab, int kind) {
  Case c;
  const Shape shape = Shape(rng() % 4);
  const float scale = std::array<float, 4>{0.5f, 2.0f, 6.0f, 15.0f}[rng() % 4];
  std::normal_distribution<float> nd(0.0f, scale);
  c.logits.resize(size_t(vocab));
  for (auto& v : c.logits) {
    v = nd(rng);
    if (shape == Shape::kTies) v = std::round(v * 2.0f) / 2.0f;  // few distinct values: many ties
  }
  if (shape == Shape::kPeaked)
    for (int j = 0; j < 8; ++j) c.logits[rng() % size_t(vocab)] += 4.0f * scale;
  if (shape == Shape::kWithNegInf && vocab >= 16)
    for (int64_t j = 0; j < vocab / 3; ++j)
      c.logits[rng() % size_t(vocab)] = -std::numeric_limits<float>::infinity();
  auto& p = c.params;
  std::uniform_real_distribution<float> u01(0.0f, 1.0f);
  p.seed = rng();
  c.sample_index = int32_t(rng() % 100000);
  switch (kind % 8) {
    case 0:
      p.temperature = 0.0f;
      break;  // greedy
    case 1:
      p.temperature = 0.3f + 1.5f * u01(rng);
      break;  // temperature only
    case 2:
      p.top_k = 1 + int32_t(rng() % 100);
      p.temperature = 1.0f;
      break;  // top-k
    case 3:
      p.top_p = 0.05f + 0.9f * u01(rng);
      p.temperature = 0.7f;
      break;  // top-p
    case 4:
      p.min_p = 0.001f + 0.2f * u01(rng);
      break;  // min-p
    case 5:   // everything
      p.top_k = 1 + int32_t(rng() % 2000);
      p.top_p = 0.5f + 0.5f * u01(rng);
      p.min_p = 0.01f * u01(rng);
      p.temperature = 0.5f + u01(rng);
      break;
    case 6:
      p.top_k = 1;
      break;  // greedy by top_k
    case 7:
      p.top_p = 1e-6f;
      break;  // the first token only
  }
  if (rng() % 2) p.num_logprobs = int32_t(rng() % 21);
  if (rng() % 3 == 0) {  // penalties over a history with repeats
    p.repetition_penalty = 0.8f + 0.6f * u01(rng);
    if (rng() % 2) p.frequency_penalty = 2.0f * u01(rng) - 1.0f;
    if (rng() % 2) p.presence_penalty = 2.0f * u01(rng) - 1.0f;
    const int32_t pool = 1 + int32_t(rng() % 300);
    c.prompt.resize(rng() % 700);
    c.output.resize(rng() % 300);
    for (auto& id : c.prompt) id = int32_t(rng() % size_t(std::min<int64_t>(pool, vocab)));
    for (auto& id : c.output) id = int32_t(rng() % size_t(pool)) * 7 % int32_t(vocab);
  }
  if (vocab >= 16 && rng() % 4 == 0) {
    c.banned.resize(1 + rng() % 5);
    for (auto& id : c.banned) id = int32_t(rng() % size_t(vocab));
  }
  if (vocab >= 16 && rng() % 3 == 0) {  // a grammar's mask: a few allowed tokens, or about half of them
    c.mask.assign(size_t((vocab + 31) / 32), 0u);
    const bool sparse = rng() % 2;
    auto allow = [&](int64_t id) { c.mask[size_t(id) / 32] |= 1u << (id % 32); };
    if (sparse) {
      for (int j = 1 + int(rng() % 40); j > 0; --j) allow(int64_t(rng() % size_t(vocab)));
    } else {
      for (int64_t id = 0; id < vocab; ++id)
        if (rng() % 2) allow(id);
    }
    const int32_t kept = int32_t(rng() % size_t(vocab));  // one allowed token that can be drawn
    allow(kept);
    if (std::isinf(c.logits[size_t(kept)])) c.logits[size_t(kept)] = 0.0f;
    std::erase(c.banned, kept);
  }
  return c;
}

// Samples every case on the GPU in one launch (one row each) and on the host; compares them.
std::vector<RowResult> check_batch(const std::vector<Case>& cases, int64_t vocab, int* draws_checked) {
  const int64_t rows = int64_t(cases.size());
  std::vector<float> logits;
  std::vector<int32_t> history, banned;
  std::vector<uint32_t> masks;
  const int32_t mask_words = int32_t((vocab + 31) / 32);
  std::vector<RowParams> params(cases.size());
  for (size_t r = 0; r < cases.size(); ++r) {
    const Case& c = cases[r];
    logits.insert(logits.end(), c.logits.begin(), c.logits.end());
    RowParams& P = params[r];
    P.logits_row = int32_t(r);
    P.greedy = c.params.is_greedy();
    P.temperature = c.params.temperature;
    P.top_k = c.params.top_k;
    P.top_p = c.params.top_p;
    P.min_p = c.params.min_p;
    P.frequency_penalty = c.params.frequency_penalty;
    P.presence_penalty = c.params.presence_penalty;
    P.repetition_penalty = c.params.repetition_penalty;
    P.penalties = c.params.uses_penalties();
    P.seed = c.params.seed;
    P.sample_index = c.sample_index;
    P.num_logprobs = c.params.num_logprobs;
    P.prompt_begin = int32_t(history.size());
    P.prompt_len = int32_t(c.prompt.size());
    history.insert(history.end(), c.prompt.begin(), c.prompt.end());
    P.output_begin = int32_t(history.size());
    P.output_len = int32_t(c.output.size());
    history.insert(history.end(), c.output.begin(), c.output.end());
    P.banned_begin = int32_t(banned.size());
    P.num_banned = int32_t(c.banned.size());
    banned.insert(banned.end(), c.banned.begin(), c.banned.end());
    if (!c.mask.empty()) {
      P.mask_row = int32_t(masks.size() / size_t(mask_words));
      masks.insert(masks.end(), c.mask.begin(), c.mask.end());
    }
  }
  DeviceBuffer<float> d_logits(logits);
  DeviceBuffer<uint32_t> d_masks(masks.empty() ? std::vector<uint32_t>{0} : masks);
  DeviceBuffer<RowParams> d_params(params);
  DeviceBuffer<int32_t> d_history(history.empty() ? std::vector<int32_t>{0} : history);
  DeviceBuffer<float> d_history_raw(std::max<size_t>(history.size(), 1));
  DeviceBuffer<int32_t> d_banned(banned.empty() ? std::vector<int32_t>{0} : banned);
  DeviceBuffer<int32_t> d_scratch(size_t(rows * vocab));
  ORCHID_CUDA_CHECK(cudaMemset(d_scratch.get(), 0, penalty_scratch_bytes(rows, vocab)));
  DeviceBuffer<RowResult> d_out(cases.size());
  SampleArgs a;
  a.logits = d_logits.get();
  a.vocab = vocab;
  a.params = d_params.get();
  a.rows = rows;
  a.history = d_history.get();
  a.history_raw = d_history_raw.get();
  a.banned = d_banned.get();
  a.penalty_scratch = d_scratch.get();
  a.out = d_out.get();
  a.token_masks = d_masks.get();
  a.mask_words = mask_words;
  sample_rows(a, nullptr);
  ORCHID_CUDA_CHECK(cudaDeviceSynchronize());
  const auto got = d_out.download();
  const auto scratch = d_scratch.download();
  size_t dirty = 0;
  for (int32_t x : scratch) dirty += x != 0;
  EXPECT_EQ(dirty, 0u) << "penalty scratch entries not left zero";

  for (size_t r = 0; r < cases.size(); ++r) {
    const Case& c = cases[r];
    runtime::SampleInput in;
    in.logits = c.logits;
    in.params = &c.params;
    in.sample_index = c.sample_index;
    in.prompt_tokens = c.prompt;
    in.output_tokens = c.output;
    in.banned_tokens = c.banned;
    in.allowed_mask = c.mask;
    const runtime::SampledToken want = runtime::sample_token(in);
    const RowResult& g = got[r];
    const auto& p = c.params;
    SCOPED_TRACE(::testing::Message()
                 << "row " << r << " vocab " << vocab << " T " << p.temperature << " k " << p.top_k << " p "
                 << p.top_p << " min_p " << p.min_p << " rep " << p.repetition_penalty << " freq "
                 << p.frequency_penalty << " pres " << p.presence_penalty << " logprobs " << p.num_logprobs
                 << " banned " << c.banned.size() << " masked " << !c.mask.empty() << " history "
                 << c.prompt.size() << "+" << c.output.size());
    EXPECT_EQ(g.token, want.token);
    if (g.token != want.token) continue;
    ++*draws_checked;
    if (p.num_logprobs >= 0) {
      EXPECT_NEAR(g.logprob, want.logprob, 1e-5 * std::max(1.0f, std::fabs(want.logprob)));
      EXPECT_EQ(size_t(g.num_top), want.top.size());
      for (size_t j = 0; j < want.top.size() && j < size_t(g.num_top); ++j) {
        EXPECT_EQ(g.top_ids[j], want.top[j].first) << "top " << j;
        EXPECT_NEAR(g.top_logprobs[j], want.top[j].second,
                    1e-5 * std::max(1.0f, std::fabs(want.top[j].second)));
      }
    }
  }
  return got;
}

class GpuSampler : public ::testing::Test {
 protected:
  void SetUp() override { ORCHID_REQUIRE_GPU_OR_SKIP(); }
};

TEST_F(GpuSampler, MatchesTheHostSamplerOnRandomRows) {
  const uint64_t seed = orchid::testing::test_seed();
  SCOPED_TRACE(::testing::Message() << "ORCHID_TEST_SEED=" << seed);
  std::mt19937_64 rng(seed);
  int checked = 0;
  for (int64_t vocab : {int64_t(1), int64_t(7), int64_t(1000), int64_t(50257), int64_t(201088)}) {
    const int batches = vocab >= 50000 ? 4 : 8;
    for (int b = 0; b < batches; ++b) {
      std::vector<Case> cases;
      const int rows = 1 + int(rng() % 40);
      for (int r = 0; r < rows; ++r) cases.push_back(random_case(rng, vocab, int(rng() % 8)));
      check_batch(cases, vocab, &checked);
      if (HasFailure()) return;
    }
  }
  std::printf("GPU sampler: %d draws identical to the host sampler\n", checked);
}

TEST_F(GpuSampler, EveryModeOnTheFullVocabulary) {
  const uint64_t seed = orchid::testing::test_seed();
  SCOPED_TRACE(::testing::Message() << "ORCHID_TEST_SEED=" << seed);
  std::mt19937_64 rng(seed);
  int checked = 0;
  for (int kind = 0; kind < 8; ++kind) {
    std::vector<Case> cases;
    for (int r = 0; r < 24; ++r) cases.push_back(random_case(rng, 201088, kind));
    check_batch(cases, 201088, &checked);
    if (HasFailure()) return;
  }
}

// The same (seed, sample_index) draws the same token whatever the batch around it; different sample
// indices draw different tokens from a flat distribution.
TEST_F(GpuSampler, DrawsDependOnlyOnSeedAndIndex) {
  std::mt19937_64 rng(7);
  Case c = random_case(rng, 50257, 1);
  c.params = {};
  c.prompt.clear();
  c.output.clear();
  c.banned.clear();
  c.params.temperature = 1.0f;
  c.params.seed = 12345;
  std::fill(c.logits.begin(), c.logits.end(), 0.0f);
  std::vector<Case> batch;
  for (int i = 0; i < 64; ++i) {
    Case x = c;
    x.sample_index = i % 8;
    batch.push_back(x);
  }
  int checked = 0;
  const auto got = check_batch(batch, 50257, &checked);  // each equals the host's
  EXPECT_EQ(checked, 64);
  std::set<int32_t> distinct;
  for (int i = 0; i < 64; ++i) {
    EXPECT_EQ(got[size_t(i)].token, got[size_t(i % 8)].token) << "row " << i;
    distinct.insert(got[size_t(i)].token);
  }
  EXPECT_GE(distinct.size(), 6u);  // 8 draws from 50257 equally likely tokens
}

}  // namespace
}  // namespace orchid::kernels::sampling
