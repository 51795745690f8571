// Host sampling: the reference semantics of every SamplingParams field, used by the CPU backend and as the
// oracle for the GPU sampler. Order: penalties on the raw logits -> (greedy: argmax, lowest id on ties) ->
// temperature -> top-k -> top-p -> min-p -> draw with a counter-based RNG keyed by (seed, sample_index), so a
// request draws the same tokens whatever else shares its batch. Logprobs are the log-softmax of the raw
// logits.
#pragma once

#include <cstdint>
#include <span>

#include "runtime/backend.h"

namespace orchid::runtime {

struct SampleInput {
  std::span<const float> logits;  // one row, vocab_size entries
  const SamplingParams* params = nullptr;
  int32_t sample_index = 0;                // index of this token in the request's output
  std::span<const int32_t> prompt_tokens;  // for repetition_penalty
  std::span<const int32_t> output_tokens;  // for frequency/presence/repetition penalties
};

SampledToken sample_token(const SampleInput& in);

}  // namespace orchid::runtime
