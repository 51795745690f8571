// Host sampling: the reference semantics of every SamplingParams field, used by the CPU backend and as the
// oracle for the GPU sampler. Order: penalties on the raw logits -> banned and masked-out tokens (-inf) ->
// (greedy: argmax, lowest id on ties) -> temperature -> top-k -> top-p -> min-p -> one uniform draw from a
// counter-based RNG keyed by (seed, sample_index) (runtime/philox.h), so a request draws the same tokens
// whatever else shares its batch. Logprobs are the log-softmax of the raw logits (before penalties and
// temperature); with an allowed-token mask (structured outputs) the masked tokens are left out of that
// softmax too, so logprobs describe the distribution the token was drawn from and never list a token that
// could not be drawn.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "runtime/backend.h"

namespace orchid::runtime {

struct SampleInput {
  std::span<const float> logits;  // one row, vocab_size entries
  const SamplingParams* params = nullptr;
  int32_t sample_index = 0;                // index of this token in the request's output
  std::span<const int32_t> prompt_tokens;  // for repetition_penalty
  std::span<const int32_t> output_tokens;  // for frequency/presence/repetition penalties
  std::span<const int32_t> banned_tokens;  // never drawn (e.g. stop ids before min_tokens)
  std::span<const uint32_t> allowed_mask;  // empty: every token; else StepBatch::token_masks' row layout
};

// Whether `token` is set in a StepBatch::token_masks row.
inline bool mask_allows(std::span<const uint32_t> mask, int32_t token) {
  return (mask[size_t(token) >> 5] >> (uint32_t(token) & 31u)) & 1u;
}

SampledToken sample_token(const SampleInput& in);

// The SampleInput of one sequence of a step (params, sample_index, histories, banned tokens) over its
// logits row; both backends sample through this so they read StepBatch identically. `offset` is the
// position among the sequence's sampled ones (StepSequence::num_draft): sample index and output history
// both advance by it.
SampleInput step_sample_input(const StepBatch& batch, const StepSequence& seq, std::span<const float> logits,
                              int32_t offset = 0);

// Everything one sequence of a step asks the sampler for: one token, or with drafts the chain of draws that
// ends at the first draw differing from the proposal after it (StepSequence::num_draft). `rows` holds the
// logits after each of the sequence's last num_draft + 1 new tokens, back to back. Appends the drawn tokens
// to `out` (1 + the accepted drafts) and returns how many drafts were accepted.
int32_t sample_sequence(const StepBatch& batch, const StepSequence& seq, std::span<const float> rows,
                        std::vector<SampledToken>& out);
// The same rule over draws already made at every one of those positions (a backend that draws them all at
// once, the GPU's): appends the draws up to the first that differs from its draft, that one included, and
// returns how many drafts were accepted.
int32_t accept_drafts(const StepBatch& batch, const StepSequence& seq, std::span<const SampledToken> draws,
                      std::vector<SampledToken>& out);

// The steps of sample_token, exposed for tests and as the specification of the GPU sampler.

// In place on one row of logits; no-op when !params.uses_penalties().
void apply_penalties(std::span<float> logits, const SamplingParams& params,
                     std::span<const int32_t> prompt_tokens, std::span<const int32_t> output_tokens);

// Ids that a non-greedy draw can return, ascending, given penalized (and banned) logits: temperature,
// top-k, top-p, min-p. `weights` receives sampling_weight(l, max, 1/T) (core/sampling_weight.h) for each of
// them, in the same order.
std::vector<int32_t> sampling_candidates(std::span<const float> logits, const SamplingParams& params,
                                         std::vector<double>* weights = nullptr);

}  // namespace orchid::runtime
