// Verification of drafts (sample_sequence): over 20,000 seeds, the tokens a drafted step emits follow the
// target's distribution at each position, for temperature, top-k, top-p and min-p (chi-square, p > 0.01),
// whatever the drafts; a draft is accepted as often as the target draws it; and a seed gives the tokens that
// the same seed gives one position at a time without drafts. The expected distributions are computed here
// from the definitions, not by the sampler.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "runtime/backend.h"
#include "runtime/sampler.h"

namespace orchid::runtime {
namespace {

constexpr int kVocab = 10;

std::vector<float> random_logits(uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.2f);
  std::vector<float> l(kVocab);
  for (float& v : l) v = d(rng);
  return l;
}

// The sampling distribution by definition: softmax(l / T), then top-k, then top-p over what is left
// (renormalized), then min-p relative to the most likely token.
std::vector<double> target_distribution(const std::vector<float>& l, const SamplingParams& p) {
  std::vector<double> prob(l.size());
  const double mx = *std::max_element(l.begin(), l.end());
  for (size_t i = 0; i < l.size(); ++i) prob[i] = std::exp((l[i] - mx) / p.temperature);
  std::vector<size_t> order(l.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return prob[a] > prob[b]; });
  size_t keep = p.top_k > 0 ? std::min(order.size(), size_t(p.top_k)) : order.size();
  double z = 0;
  for (size_t k = 0; k < keep; ++k) z += prob[order[k]];
  if (p.top_p < 1.0f) {
    double cum = 0;
    size_t n = 0;
    while (n < keep && cum < p.top_p * z) cum += prob[order[n++]];
    keep = n;
  }
  std::vector<double> out(l.size(), 0.0);
  const double top = prob[order[0]];
  for (size_t k = 0; k < keep; ++k)
    if (prob[order[k]] >= p.min_p * top) out[order[k]] = prob[order[k]];
  const double total = std::accumulate(out.begin(), out.end(), 0.0);
  for (double& v : out) v /= total;
  return out;
}

// Upper tail of the chi-square distribution (Wilson-Hilferty; ample for a 0.01 threshold).
double chi_square_p(double x, int dof) {
  const double k = dof, z = (std::cbrt(x / k) - (1 - 2 / (9 * k))) / std::sqrt(2 / (9 * k));
  return 0.5 * std::erfc(z / std::sqrt(2.0));
}

// p-value of `counts` under `prob`; bins expected below 5 pooled; a token of probability 0 drawn fails.
double goodness_of_fit(const std::vector<int>& counts, const std::vector<double>& prob) {
  const double n = std::accumulate(counts.begin(), counts.end(), 0.0);
  double stat = 0, pooled_count = 0, pooled_expect = 0;
  int bins = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (prob[i] == 0) {
      EXPECT_EQ(counts[i], 0) << "token " << i << " cannot be drawn";
      continue;
    }
    const double e = prob[i] * n;
    if (e < 5) {
      pooled_count += counts[i];
      pooled_expect += e;
      continue;
    }
    stat += (counts[i] - e) * (counts[i] - e) / e;
    ++bins;
  }
  if (pooled_expect > 0) {
    stat += (pooled_count - pooled_expect) * (pooled_count - pooled_expect) / std::max(pooled_expect, 1e-9);
    ++bins;
  }
  return bins > 1 ? chi_square_p(stat, bins - 1) : 1.0;
}

// One sequence of 1 + 2 new tokens, the last two drafts, sampled at every position.
StepBatch drafted_batch(const SamplingParams& p, int32_t d0, int32_t d1, int32_t sample_index) {
  StepBatch b;
  b.tokens = {3, d0, d1};
  StepSequence s;
  s.num_tokens = 3;
  s.num_draft = 2;
  s.sample = true;
  s.sample_index = sample_index;
  b.seqs.push_back(s);
  b.params.push_back(p);
  return b;
}

struct Config {
  const char* name;
  SamplingParams params;
};

std::vector<Config> configs() {
  std::vector<Config> c(4);
  c[0] = {"temperature 0.7", {}};
  c[0].params.temperature = 0.7f;
  c[1] = {"top-k 4", {}};
  c[1].params.top_k = 4;
  c[2] = {"temperature 1.3, top-p 0.8", {}};
  c[2].params.temperature = 1.3f;
  c[2].params.top_p = 0.8f;
  c[3] = {"min-p 0.15", {}};
  c[3].params.min_p = 0.15f;
  return c;
}

TEST(DraftVerification, EmittedTokensFollowTheTargetAtEveryPosition) {
  constexpr int kDraws = 20000;
  const std::vector<float> row0 = random_logits(1), row1 = random_logits(2), row2 = random_logits(3);
  std::vector<float> rows = row0;
  rows.insert(rows.end(), row1.begin(), row1.end());
  rows.insert(rows.end(), row2.begin(), row2.end());
  for (const Config& c : configs()) {
    const auto p0 = target_distribution(row0, c.params), p1 = target_distribution(row1, c.params);
    // Drafts: a likely token first, then an unlikely-but-possible one.
    const int32_t d0 = int32_t(std::max_element(p0.begin(), p0.end()) - p0.begin());
    int32_t d1 = 0;
    for (int32_t t = 0; t < kVocab; ++t)
      if (p1[size_t(t)] > 0 && (p1[size_t(d1)] == 0 || p1[size_t(t)] < p1[size_t(d1)])) d1 = t;
    std::vector<int> first(kVocab, 0), second(kVocab, 0);
    int accepted0 = 0;
    for (int i = 0; i < kDraws; ++i) {
      SamplingParams p = c.params;
      p.seed = 1000 + uint64_t(i);
      const StepBatch b = drafted_batch(p, d0, d1, 4);
      std::vector<SampledToken> out;
      const int32_t accepted = sample_sequence(b, b.seqs[0], rows, out);
      ASSERT_EQ(out.size(), size_t(accepted) + 1);
      for (int32_t k = 0; k < accepted; ++k) ASSERT_EQ(out[size_t(k)].token, b.tokens[size_t(1 + k)]);
      ++first[size_t(out[0].token)];
      if (accepted >= 1) {
        ++accepted0;
        ++second[size_t(out[1].token)];
      }
    }
    EXPECT_GT(goodness_of_fit(first, p0), 0.01) << c.name << ": first token";
    EXPECT_GT(goodness_of_fit(second, p1), 0.01)
        << c.name << ": second token, given the first draft accepted";
    const double expect = p0[size_t(d0)] * kDraws;
    EXPECT_NEAR(accepted0, expect, 5 * std::sqrt(expect * (1 - p0[size_t(d0)])) + 1) << c.name;
  }
}

TEST(DraftVerification, ASeedDrawsWhatItDrawsWithoutDrafts) {
  const std::vector<float> row0 = random_logits(4), row1 = random_logits(5), row2 = random_logits(6);
  std::vector<float> rows = row0;
  rows.insert(rows.end(), row1.begin(), row1.end());
  rows.insert(rows.end(), row2.begin(), row2.end());
  const std::vector<const std::vector<float>*> by_position = {&row0, &row1, &row2};
  for (const Config& c : configs()) {
    for (uint64_t seed = 0; seed < 300; ++seed) {
      SamplingParams p = c.params;
      p.seed = seed;
      // Plain decoding at sample indices 7, 8, 9; then drafts that are that output (all accepted) or not.
      std::vector<int32_t> plain;
      for (int k = 0; k < 3; ++k) {
        SampleInput in;
        in.logits = *by_position[size_t(k)];
        in.params = &p;
        in.sample_index = 7 + k;
        plain.push_back(sample_token(in).token);
      }
      for (int32_t wrong = 0; wrong < 3; ++wrong) {
        int32_t d0 = plain[0], d1 = plain[1];
        if (wrong == 0) d0 = (d0 + 1) % kVocab;
        if (wrong == 1) d1 = (d1 + 1) % kVocab;
        const StepBatch b = drafted_batch(p, d0, d1, 7);
        std::vector<SampledToken> out;
        const int32_t accepted = sample_sequence(b, b.seqs[0], rows, out);
        EXPECT_EQ(accepted, std::min(wrong, 2)) << c.name << " seed " << seed;
        for (size_t k = 0; k < out.size(); ++k)
          EXPECT_EQ(out[k].token, plain[k]) << c.name << " seed " << seed;
      }
    }
  }
}

}  // namespace
}  // namespace orchid::runtime
