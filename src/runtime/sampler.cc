#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "core/philox.h"
#include "core/sampling_weight.h"

namespace orchid::runtime {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Higher logit first; the lower id wins a tie, so every implementation ranks identically.
struct ByLogitDesc {
  std::span<const float> l;
  bool operator()(int32_t a, int32_t b) const { return l[a] > l[b] || (l[a] == l[b] && a < b); }
};

int32_t argmax_lowest_id(std::span<const float> l) {
  int32_t best = 0;
  for (int32_t i = 1; i < int32_t(l.size()); ++i)
    if (l[i] > l[best]) best = i;
  return best;
}

double log_sum_exp(std::span<const float> l) {
  const double m = l[argmax_lowest_id(l)];
  double s = 0;
  for (float v : l) s += std::exp(double(v) - m);
  return m + std::log(s);
}

// Keeps the first `keep` of `ids` in ByLogitDesc order, sorted; grows the sorted prefix lazily.
void sort_prefix(std::vector<int32_t>& ids, size_t keep, std::span<const float> l) {
  keep = std::min(keep, ids.size());
  std::partial_sort(ids.begin(), ids.begin() + std::ptrdiff_t(keep), ids.end(), ByLogitDesc{l});
}

}  // namespace

void apply_penalties(std::span<float> logits, const SamplingParams& p, std::span<const int32_t> prompt_tokens,
                     std::span<const int32_t> output_tokens) {
  if (!p.uses_penalties()) return;
  const int32_t vocab = int32_t(logits.size());
  // Scratch sized to the vocabulary, reset after use so each call costs O(history), not O(vocab).
  thread_local std::vector<int32_t> count;
  if (int32_t(count.size()) < vocab) count.assign(size_t(vocab), 0);
  auto check_id = [vocab](int32_t id) {
    ORCHID_CHECK(id >= 0 && id < vocab, "history token {} out of range", id);
  };

  // Repetition penalty as defined by CTRL (Keskar et al., 2019) and implemented by Hugging Face's
  // RepetitionPenaltyLogitsProcessor and vLLM: every token present in the prompt or the output has its
  // logit divided by the penalty when positive and multiplied by it otherwise; applied once per token id.
  if (p.repetition_penalty != 1.0f) {
    auto penalize = [&](int32_t id) {
      check_id(id);
      if (count[id] != 0) return;
      count[id] = 1;
      float& v = logits[id];
      v = v > 0.0f ? v / p.repetition_penalty : v * p.repetition_penalty;
    };
    for (int32_t id : prompt_tokens) penalize(id);
    for (int32_t id : output_tokens) penalize(id);
    for (int32_t id : prompt_tokens) count[id] = 0;
    for (int32_t id : output_tokens) count[id] = 0;
  }

  // Frequency and presence penalties as the OpenAI API reference defines them, on generated tokens only:
  //   mu[j] -> mu[j] - c[j] * frequency_penalty - float(c[j] > 0) * presence_penalty
  // where c[j] counts how often token j was sampled before the current position (vLLM applies the same
  // formula after the repetition penalty).
  if (p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f) {
    for (int32_t id : output_tokens) {
      check_id(id);
      ++count[id];
    }
    for (int32_t id : output_tokens) {
      if (count[id] == 0) continue;  // already applied for this id
      logits[id] -= float(count[id]) * p.frequency_penalty + p.presence_penalty;
      count[id] = 0;
    }
  }
}

std::vector<int32_t> sampling_candidates(std::span<const float> l, const SamplingParams& p,
                                         std::vector<double>* weights) {
  ORCHID_CHECK(p.temperature > 0.0f, "sampling_candidates needs a positive temperature");
  std::vector<int32_t> ids;
  ids.reserve(l.size());
  for (int32_t i = 0; i < int32_t(l.size()); ++i)
    if (l[i] != kNegInf) ids.push_back(i);
  if (ids.empty()) fail("sampling: every token is banned or masked out");
  const float mx = l[argmax_lowest_id(l)];
  const float inv_t = 1.0f / p.temperature;
  auto weight = [&](int32_t id) { return double(sampling_weight(l[id], mx, inv_t)); };

  // top-k: the k highest logits, ties to the lower id.
  bool ascending = true;
  if (p.top_k > 0 && size_t(p.top_k) < ids.size()) {
    sort_prefix(ids, size_t(p.top_k), l);
    ids.resize(size_t(p.top_k));
    ascending = false;
  }

  // top-p: walking tokens from the most likely (ties: lower id), keep each whose preceding cumulative
  // probability (renormalized over the top-k survivors) is still below top_p; the first is always kept.
  if (p.top_p < 1.0f) {
    // The normalizer is summed in ascending id order (a fixed order, so the result is reproducible).
    double z = 0;
    if (ascending) {
      for (int32_t id : ids) z += weight(id);
    } else {
      std::vector<int32_t> asc = ids;
      std::sort(asc.begin(), asc.end());
      for (int32_t id : asc) z += weight(id);
    }
    const double limit = double(p.top_p) * z;
    size_t sorted = 0, kept = 0;
    double cum = 0;
    while (kept < ids.size()) {
      if (kept == sorted) {
        sorted = std::min(ids.size(), std::max<size_t>(64, sorted * 4));
        sort_prefix(ids, sorted, l);
      }
      if (kept > 0 && cum >= limit) break;
      cum += weight(ids[kept]);
      ++kept;
    }
    ids.resize(kept);
  }

  // min-p: drop tokens whose probability is below min_p times the most likely one's (the argmax survives
  // top-k and top-p, so its weight is exactly 1).
  if (p.min_p > 0.0f) {
    std::erase_if(ids, [&](int32_t id) { return weight(id) < double(p.min_p); });
  }

  std::sort(ids.begin(), ids.end());
  if (weights) {
    weights->resize(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) (*weights)[i] = weight(ids[i]);
  }
  return ids;
}

SampleInput step_sample_input(const StepBatch& batch, const StepSequence& seq, std::span<const float> logits,
                              int32_t offset) {
  ORCHID_CHECK(offset >= 0 && offset <= seq.num_draft, "sample offset {} with {} drafts", offset,
               seq.num_draft);
  ORCHID_CHECK(seq.params_index >= 0 && size_t(seq.params_index) < batch.params.size());
  auto range = [](const std::vector<int32_t>& v, int32_t begin, int32_t len) {
    ORCHID_CHECK(begin >= 0 && len >= 0 && size_t(begin) + size_t(len) <= v.size());
    return std::span<const int32_t>(v.data() + begin, size_t(len));
  };
  SampleInput in;
  in.logits = logits;
  in.params = &batch.params[size_t(seq.params_index)];
  in.sample_index = seq.sample_index + offset;
  in.prompt_tokens = range(batch.history_tokens, seq.prompt_history_begin, seq.prompt_history_len);
  // The history is there only when penalties apply (a prompt is never empty); the drafts follow the outputs.
  const int32_t drafted = seq.prompt_history_len > 0 ? offset : 0;
  in.output_tokens = range(batch.history_tokens, seq.output_history_begin, seq.output_history_len + drafted);
  in.banned_tokens = range(batch.banned_tokens, seq.banned_begin, seq.num_banned);
  if (seq.mask_row >= 0) {
    const size_t words = size_t(batch.mask_words);
    ORCHID_CHECK(
        words * 32 >= logits.size() && (size_t(seq.mask_row) + 1) * words <= batch.token_masks.size(),
        "mask row {} of {} words", seq.mask_row, words);
    in.allowed_mask =
        std::span<const uint32_t>(batch.token_masks.data() + size_t(seq.mask_row) * words, words);
  }
  return in;
}

int32_t sample_sequence(const StepBatch& batch, const StepSequence& seq, std::span<const float> rows,
                        std::vector<SampledToken>& out) {
  const size_t n = size_t(seq.num_draft) + 1;
  ORCHID_CHECK(!rows.empty() && rows.size() % n == 0, "{} logits for {} sampled positions", rows.size(), n);
  ORCHID_CHECK(seq.num_draft == 0 || seq.mask_row < 0, "drafts in a constrained sequence");
  const size_t vocab = rows.size() / n;
  const int32_t* drafts = batch.tokens.data() + seq.token_begin + seq.num_tokens - seq.num_draft;
  for (int32_t i = 0;; ++i) {
    out.push_back(sample_token(step_sample_input(batch, seq, rows.subspan(size_t(i) * vocab, vocab), i)));
    if (i == seq.num_draft || out.back().token != drafts[i]) return i;
  }
}

int32_t accept_drafts(const StepBatch& batch, const StepSequence& seq, std::span<const SampledToken> draws,
                      std::vector<SampledToken>& out) {
  ORCHID_CHECK(draws.size() == size_t(seq.num_draft) + 1, "{} draws for {} drafts", draws.size(),
               seq.num_draft);
  const int32_t* drafts = batch.tokens.data() + seq.token_begin + seq.num_tokens - seq.num_draft;
  for (int32_t i = 0;; ++i) {
    out.push_back(draws[size_t(i)]);
    if (i == seq.num_draft || draws[size_t(i)].token != drafts[i]) return i;
  }
}

SampledToken sample_token(const SampleInput& in) {
  ORCHID_CHECK(!in.logits.empty() && in.params != nullptr);
  const SamplingParams& p = *in.params;
  const int32_t vocab = int32_t(in.logits.size());

  thread_local std::vector<float> work;
  work.assign(in.logits.begin(), in.logits.end());
  apply_penalties(work, p, in.prompt_tokens, in.output_tokens);
  for (int32_t id : in.banned_tokens) {
    ORCHID_CHECK(id >= 0 && id < vocab, "banned token {} out of range", id);
    work[id] = kNegInf;
  }
  // Logprobs are taken over the allowed tokens only (the header says why).
  thread_local std::vector<float> masked;
  std::span<const float> lp_logits = in.logits;
  if (!in.allowed_mask.empty()) {
    masked.assign(in.logits.begin(), in.logits.end());
    for (int32_t id = 0; id < vocab; ++id)
      if (!mask_allows(in.allowed_mask, id)) work[id] = masked[id] = kNegInf;
    lp_logits = masked;
  }

  SampledToken out;
  if (p.is_greedy()) {
    out.token = argmax_lowest_id(work);
    if (work[out.token] == kNegInf) fail("sampling: every token is banned or masked out");
  } else {
    std::vector<double> w;
    const std::vector<int32_t> ids = sampling_candidates(work, p, &w);
    // Inverse CDF over the candidates in ascending id order: one uniform per token, so the GPU sampler
    // reproduces the draw from (seed, sample_index) alone.
    double total = 0;
    for (double x : w) total += x;
    const double target = sampling_uniform(p.seed, uint32_t(in.sample_index)) * total;
    out.token = ids.back();
    double cum = 0;
    for (size_t i = 0; i < ids.size(); ++i) {
      cum += w[i];
      if (target < cum) {
        out.token = ids[i];
        break;
      }
    }
  }

  if (p.num_logprobs >= 0) {
    const double lse = log_sum_exp(lp_logits);
    out.logprob = float(double(lp_logits[out.token]) - lse);
    if (p.num_logprobs > 0) {
      std::vector<int32_t> ids(static_cast<size_t>(vocab));
      for (int32_t i = 0; i < vocab; ++i) ids[i] = i;
      if (!in.allowed_mask.empty()) std::erase_if(ids, [&](int32_t id) { return lp_logits[id] == kNegInf; });
      sort_prefix(ids, size_t(p.num_logprobs), lp_logits);
      ids.resize(std::min(ids.size(), size_t(p.num_logprobs)));
      out.top.reserve(ids.size());
      for (int32_t id : ids) out.top.emplace_back(id, float(double(lp_logits[id]) - lse));
    }
  }
  return out;
}

}  // namespace orchid::runtime
