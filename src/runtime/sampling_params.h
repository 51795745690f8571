// Per-request sampling parameters, carried by every StepBatch. Shared by the engine (which validates and
// owns them) and both backends (which apply them when they sample).
#pragma once

#include <cstdint>

namespace orchid::runtime {

struct SamplingParams {
  float temperature = 1.0f;         // <= 0: greedy
  int32_t top_k = 0;                // 0: off
  float top_p = 1.0f;               // 1: off
  float min_p = 0.0f;               // 0: off
  float frequency_penalty = 0.0f;   // OpenAI semantics, on generated tokens
  float presence_penalty = 0.0f;    // OpenAI semantics, on generated tokens
  float repetition_penalty = 1.0f;  // HF/vLLM semantics, on prompt and generated tokens; 1: off
  uint64_t seed = 0;                // the engine draws one when the request has none
  int32_t num_logprobs = -1;        // -1: none; 0: the sampled token's; N: plus the N most likely

  bool is_greedy() const { return temperature <= 0.0f || top_k == 1; }
  bool uses_penalties() const {
    return frequency_penalty != 0.0f || presence_penalty != 0.0f || repetition_penalty != 1.0f;
  }
};

}  // namespace orchid::runtime
