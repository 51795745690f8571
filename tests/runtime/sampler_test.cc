// Each sampling knob against an independent, naive computation of its definition, and the draw against
// the distribution it should follow.
#include "runtime/sampler.h"

#include "core/error.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <set>

namespace orchid::runtime {
namespace {

std::vector<float> random_logits(int n, uint32_t seed, float scale = 4.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> l(static_cast<size_t>(n));
  for (float& v : l) v = d(rng);
  return l;
}

SampledToken draw(const std::vector<float>& logits, const SamplingParams& p, int32_t index = 0,
                  std::span<const int32_t> prompt = {}, std::span<const int32_t> output = {},
                  std::span<const int32_t> banned = {}) {
  SampleInput in;
  in.logits = logits;
  in.params = &p;
  in.sample_index = index;
  in.prompt_tokens = prompt;
  in.output_tokens = output;
  in.banned_tokens = banned;
  return sample_token(in);
}

// Ids by probability, most likely first, ties to the lower id (the order every rule is defined in).
std::vector<int32_t> ranked(const std::vector<float>& l) {
  std::vector<int32_t> ids(l.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return l[a] > l[b]; });
  return ids;
}

std::vector<long double> softmax(const std::vector<float>& l, double temperature = 1.0) {
  const long double mx = *std::max_element(l.begin(), l.end());
  std::vector<long double> p(l.size());
  long double z = 0;
  for (size_t i = 0; i < l.size(); ++i) z += p[i] = std::exp((l[i] - mx) / temperature);
  for (auto& v : p) v /= z;
  return p;
}

TEST(Sampler, GreedyIsArgmaxWithLowestIdOnTies) {
  for (uint32_t s = 0; s < 50; ++s) {
    auto l = random_logits(100, s);
    SamplingParams p;
    p.temperature = 0;
    EXPECT_EQ(draw(l, p).token, ranked(l)[0]);
  }
  std::vector<float> tie = {0.5f, 2.0f, -1.0f, 2.0f, 2.0f};
  SamplingParams p;
  p.temperature = 0;
  EXPECT_EQ(draw(tie, p).token, 1);
  p.temperature = 1;
  p.top_k = 1;  // top_k = 1 is greedy too
  EXPECT_EQ(draw(tie, p, 5).token, 1);
}

TEST(Sampler, LogprobsAreLogSoftmaxOfRawLogitsWithTopN) {
  auto l = random_logits(300, 1);
  l[17] = l[42] = l[99] = 30.0f;  // three-way tie at the top: lower ids first
  SamplingParams p;
  p.temperature = 0.7f;
  p.repetition_penalty = 1.5f;  // penalties must not change the reported logprobs
  p.num_logprobs = 5;
  const std::vector<int32_t> history = {17, 3};
  const SampledToken t = draw(l, p, 9, history, history);
  const long double mx = 30.0L;
  long double z = 0;
  for (float v : l) z += std::exp((long double)v - mx);
  auto lp = [&](int32_t id) { return double((long double)l[id] - mx - std::log(z)); };
  EXPECT_NEAR(t.logprob, lp(t.token), 1e-5);
  const auto order = ranked(l);
  ASSERT_EQ(t.top.size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(t.top[i].first, order[i]);
    EXPECT_NEAR(t.top[i].second, lp(order[i]), 1e-5);
  }
  EXPECT_EQ(t.top[0].first, 17);
  EXPECT_EQ(t.top[1].first, 42);
  EXPECT_EQ(t.top[2].first, 99);
  p.num_logprobs = 0;
  EXPECT_TRUE(draw(l, p, 9).top.empty());
}

TEST(Sampler, PenaltiesFollowTheirDefinitions) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 200; ++trial) {
    const int vocab = 40;
    auto l = random_logits(vocab, 100 + trial, 2.0f);
    std::vector<int32_t> prompt(size_t(rng() % 10)), output(size_t(rng() % 20));
    for (auto& t : prompt) t = int32_t(rng() % vocab);
    for (auto& t : output) t = int32_t(rng() % vocab);
    SamplingParams p;
    p.repetition_penalty = trial % 3 == 0 ? 1.0f : 0.5f + float(rng() % 100) / 50.0f;
    p.frequency_penalty = float(int(rng() % 41) - 20) / 10.0f;
    p.presence_penalty = float(int(rng() % 41) - 20) / 10.0f;
    // The definitions, spelled out per token id: repetition (HF/vLLM) on prompt or output ids, then
    // OpenAI's mu[j] - c[j] * alpha_frequency - (c[j] > 0) * alpha_presence on output counts.
    std::vector<float> want = l;
    for (int j = 0; j < vocab; ++j) {
      const auto c = std::count(output.begin(), output.end(), j);
      const bool seen = c > 0 || std::count(prompt.begin(), prompt.end(), j) > 0;
      if (seen) want[j] = want[j] > 0 ? want[j] / p.repetition_penalty : want[j] * p.repetition_penalty;
      want[j] -= float(c) * p.frequency_penalty + (c > 0 ? p.presence_penalty : 0.0f);
    }
    std::vector<float> got = l;
    apply_penalties(got, p, prompt, output);
    for (int j = 0; j < vocab; ++j) EXPECT_FLOAT_EQ(got[j], want[j]) << "trial " << trial << " id " << j;
    // Greedy sampling sees the penalized logits.
    p.temperature = 0;
    EXPECT_EQ(draw(l, p, 0, prompt, output).token, ranked(want)[0]);
  }
}

TEST(Sampler, TopKNeverLeavesTheTopK) {
  for (uint32_t s = 0; s < 20; ++s) {
    auto l = random_logits(200, s, 1.0f);
    SamplingParams p;
    p.temperature = 5.0f;  // flat, so every allowed id gets drawn
    p.top_k = 1 + int32_t(s % 7);
    p.seed = s;
    const auto order = ranked(l);
    const std::set<int32_t> allowed(order.begin(), order.begin() + p.top_k);
    std::set<int32_t> drawn;
    for (int32_t i = 0; i < 2000; ++i) drawn.insert(draw(l, p, i).token);
    EXPECT_EQ(drawn, allowed);
    auto cand = sampling_candidates(l, p);
    EXPECT_EQ(std::set<int32_t>(cand.begin(), cand.end()), allowed);
  }
  // Ties at the k-th place go to the lower id.
  std::vector<float> tie = {1.0f, 3.0f, 2.0f, 2.0f, 2.0f};
  SamplingParams p;
  p.top_k = 3;
  EXPECT_EQ(sampling_candidates(tie, p), (std::vector<int32_t>{1, 2, 3}));
}

TEST(Sampler, TopPKeepsTheSmallestNucleus) {
  for (uint32_t s = 0; s < 100; ++s) {
    auto l = random_logits(500, s, 2.0f);
    SamplingParams p;
    p.temperature = 0.5f + float(s % 10) / 5.0f;
    p.top_p = 0.05f + float(s % 19) / 20.0f;
    // Naive: walk by probability; keep while the mass before the token is below top_p.
    const auto prob = softmax(l, p.temperature);
    std::set<int32_t> want;
    long double before = 0;
    for (int32_t id : ranked(l)) {
      if (!want.empty() && before >= p.top_p) break;
      want.insert(id);
      before += prob[size_t(id)];
    }
    auto cand = sampling_candidates(l, p);
    EXPECT_EQ(std::set<int32_t>(cand.begin(), cand.end()), want) << "seed " << s;
    for (int32_t i = 0; i < 50; ++i) EXPECT_TRUE(want.count(draw(l, p, i).token));
  }
}

TEST(Sampler, TopPAppliesToTheTopKSurvivors) {
  auto l = random_logits(100, 77, 1.0f);
  SamplingParams p;
  p.top_k = 10;
  p.top_p = 0.5f;
  const auto order = ranked(l);
  std::vector<float> kept(l.size(), -INFINITY);
  for (int i = 0; i < 10; ++i) kept[size_t(order[size_t(i)])] = l[size_t(order[size_t(i)])];
  const auto prob = softmax(kept);
  std::set<int32_t> want;
  long double before = 0;
  for (int i = 0; i < 10; ++i) {
    if (!want.empty() && before >= p.top_p) break;
    want.insert(order[size_t(i)]);
    before += prob[size_t(order[size_t(i)])];
  }
  auto cand = sampling_candidates(l, p);
  EXPECT_EQ(std::set<int32_t>(cand.begin(), cand.end()), want);
}

TEST(Sampler, MinPDropsUnlikelyTokens) {
  for (uint32_t s = 0; s < 50; ++s) {
    auto l = random_logits(300, s, 1.5f);
    SamplingParams p;
    p.temperature = 0.8f;
    p.min_p = float(s % 10) / 10.0f + 0.01f;
    const auto prob = softmax(l, p.temperature);
    const long double top = *std::max_element(prob.begin(), prob.end());
    std::vector<int32_t> want;
    for (int32_t i = 0; i < 300; ++i)
      if (prob[size_t(i)] >= p.min_p * top * (1 - 1e-12L)) want.push_back(i);
    EXPECT_EQ(sampling_candidates(l, p), want) << "seed " << s;
  }
}

TEST(Sampler, DrawsFollowTheTemperatureScaledDistribution) {
  const int vocab = 8, n = 40000;
  auto l = random_logits(vocab, 3, 1.0f);
  for (float t : {0.5f, 1.0f, 2.0f}) {
    SamplingParams p;
    p.temperature = t;
    p.seed = 99;
    std::vector<int> count(vocab, 0);
    for (int32_t i = 0; i < n; ++i) ++count[size_t(draw(l, p, i).token)];
    const auto prob = softmax(l, t);
    for (int j = 0; j < vocab; ++j) {
      const double expect = double(prob[size_t(j)]) * n;
      EXPECT_NEAR(count[size_t(j)], expect, 5 * std::sqrt(expect + 1)) << "temperature " << t << " id " << j;
    }
  }
}

TEST(Sampler, DrawsFollowTheFilteredDistribution) {
  const int n = 40000;
  auto l = random_logits(50, 8, 1.0f);
  SamplingParams p;
  p.temperature = 1.3f;
  p.top_k = 20;
  p.top_p = 0.8f;
  p.min_p = 0.1f;
  p.seed = 1234;
  std::vector<double> w;
  const auto ids = sampling_candidates(l, p, &w);
  ASSERT_GT(ids.size(), 2u);
  const double z = std::accumulate(w.begin(), w.end(), 0.0);
  std::map<int32_t, int> count;
  for (int32_t i = 0; i < n; ++i) ++count[draw(l, p, i).token];
  EXPECT_EQ(count.size(), ids.size());
  for (size_t k = 0; k < ids.size(); ++k) {
    const double expect = w[k] / z * n;
    EXPECT_NEAR(count[ids[k]], expect, 5 * std::sqrt(expect + 1));
  }
}

TEST(Sampler, SeededDrawsAreReproducibleAndIndependentOfTheCall) {
  auto l = random_logits(1000, 4, 1.0f);
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 42;
  std::vector<int32_t> a, b;
  for (int32_t i = 0; i < 200; ++i) a.push_back(draw(l, p, i).token);
  for (int32_t i = 199; i >= 0; --i) b.push_back(draw(l, p, i).token);  // another order, same draws
  std::reverse(b.begin(), b.end());
  EXPECT_EQ(a, b);
  p.seed = 43;
  std::vector<int32_t> c;
  for (int32_t i = 0; i < 200; ++i) c.push_back(draw(l, p, i).token);
  EXPECT_NE(a, c);
}

TEST(Sampler, BannedTokensAreNeverDrawn) {
  auto l = random_logits(30, 6, 1.0f);
  const auto order = ranked(l);
  const std::vector<int32_t> banned = {order[0], order[2]};
  SamplingParams p;
  p.temperature = 0;
  EXPECT_EQ(draw(l, p, 0, {}, {}, banned).token, order[1]);
  p.temperature = 3.0f;
  for (int32_t i = 0; i < 3000; ++i) {
    const int32_t t = draw(l, p, i, {}, {}, banned).token;
    ASSERT_NE(t, order[0]);
    ASSERT_NE(t, order[2]);
  }
}

TEST(Sampler, LargeVocabularyTopP) {
  // The lazily sorted nucleus agrees with the naive one on a full-size vocabulary.
  auto l = random_logits(201088, 11, 3.0f);
  SamplingParams p;
  p.top_p = 0.9f;
  const auto prob = softmax(l);
  size_t want = 0;
  long double before = 0;
  for (int32_t id : ranked(l)) {
    if (want > 0 && before >= p.top_p) break;
    ++want;
    before += prob[size_t(id)];
  }
  EXPECT_EQ(sampling_candidates(l, p).size(), want);
}

TEST(Sampler, StepSampleInputReadsTheBatch) {
  StepBatch b;
  b.params.resize(2);
  b.params[1].temperature = 0;
  b.params[1].repetition_penalty = 2.0f;
  b.history_tokens = {1, 2, 3, 4, 5};
  b.banned_tokens = {7, 8};
  StepSequence s;
  s.params_index = 1;
  s.sample_index = 3;
  s.prompt_history_begin = 0;
  s.prompt_history_len = 2;
  s.output_history_begin = 2;
  s.output_history_len = 3;
  s.banned_begin = 1;
  s.num_banned = 1;
  std::vector<float> row(10, 0.0f);
  SampleInput in = step_sample_input(b, s, row);
  EXPECT_EQ(in.params, &b.params[1]);
  EXPECT_EQ(in.sample_index, 3);
  EXPECT_EQ(std::vector<int32_t>(in.prompt_tokens.begin(), in.prompt_tokens.end()),
            (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(std::vector<int32_t>(in.output_tokens.begin(), in.output_tokens.end()),
            (std::vector<int32_t>{3, 4, 5}));
  EXPECT_EQ(std::vector<int32_t>(in.banned_tokens.begin(), in.banned_tokens.end()),
            (std::vector<int32_t>{8}));
  s.num_banned = 5;  // out of range: a programming error
  EXPECT_ANY_THROW(step_sample_input(b, s, row));
}

// Structured outputs: a token mask is the same as banning every token outside it, and logprobs are the
// log-softmax over the allowed tokens.
std::vector<uint32_t> random_mask(int n, uint32_t seed, std::vector<int32_t>* outside) {
  std::mt19937 rng(seed);
  std::vector<uint32_t> mask(size_t((n + 31) / 32), 0u);
  for (int32_t i = 0; i < n; ++i) {
    if (rng() % 3 == 0) {
      mask[size_t(i) / 32] |= 1u << (i % 32);
    } else {
      outside->push_back(i);
    }
  }
  return mask;
}

TEST(Sampler, MaskDrawsLikeBanningTheRest) {
  for (uint32_t s = 0; s < 30; ++s) {
    auto l = random_logits(300, s);
    std::vector<int32_t> outside;
    const auto mask = random_mask(300, s + 99, &outside);
    for (float t : {0.0f, 0.7f, 1.3f}) {
      SamplingParams p;
      p.temperature = t;
      p.top_k = s % 2 ? 20 : 0;
      p.top_p = s % 3 ? 0.9f : 1.0f;
      p.seed = s;
      SampleInput in;
      in.logits = l;
      in.params = &p;
      in.sample_index = int32_t(s);
      in.allowed_mask = mask;
      const SampledToken masked = sample_token(in);
      EXPECT_TRUE(mask_allows(mask, masked.token));
      EXPECT_EQ(masked.token, draw(l, p, int32_t(s), {}, {}, outside).token);
    }
  }
}

TEST(Sampler, MaskedLogprobsAreOverTheAllowedTokens) {
  auto l = random_logits(200, 5);
  std::vector<int32_t> outside;
  const auto mask = random_mask(200, 6, &outside);
  std::vector<float> allowed_logits;
  std::vector<int32_t> allowed_ids;
  for (int32_t i = 0; i < 200; ++i)
    if (mask_allows(mask, i)) {
      allowed_logits.push_back(l[size_t(i)]);
      allowed_ids.push_back(i);
    }
  SamplingParams p;
  p.temperature = 0;
  p.num_logprobs = 5;
  SampleInput in;
  in.logits = l;
  in.params = &p;
  in.allowed_mask = mask;
  const SampledToken st = sample_token(in);
  const auto probs = softmax(allowed_logits);
  const auto order = ranked(allowed_logits);
  EXPECT_EQ(st.token, allowed_ids[size_t(order[0])]);
  EXPECT_NEAR(st.logprob, std::log(double(probs[size_t(order[0])])), 1e-5);
  ASSERT_EQ(st.top.size(), 5u);
  for (size_t k = 0; k < 5; ++k) {
    EXPECT_EQ(st.top[k].first, allowed_ids[size_t(order[k])]);
    EXPECT_NEAR(st.top[k].second, std::log(double(probs[size_t(order[k])])), 1e-5);
  }
}

TEST(Sampler, EmptyMaskIsAnError) {
  auto l = random_logits(64, 1);
  std::vector<uint32_t> mask(2, 0u);
  SamplingParams p;
  p.temperature = 0;
  SampleInput in;
  in.logits = l;
  in.params = &p;
  in.allowed_mask = mask;
  EXPECT_THROW(sample_token(in), Error);
}

}  // namespace
}  // namespace orchid::runtime
