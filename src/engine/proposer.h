// Speculative decoding's proposers: for each decoding sequence of a step, a guess at its next tokens, which
// the target model verifies in that same step (runtime::StepSequence::num_draft). A proposal only changes
// how many tokens a step yields, never which: verification keeps the target's own draws.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "runtime/sampling_params.h"

namespace orchid::engine {

struct DraftRequest {
  int64_t seq_id = 0;
  std::span<const int32_t> tokens;  // the sequence so far: prompt, then outputs
  int32_t prompt_len = 0;
  int32_t max_tokens = 0;                           // propose at most this many (>= 1)
  const runtime::SamplingParams* params = nullptr;  // the request's, seed included
  std::vector<int32_t>* draft = nullptr;            // cleared by the engine; the proposer appends
};

class Proposer {
 public:
  virtual ~Proposer() = default;
  // One call per step, for every sequence that may carry drafts in it.
  virtual void propose(std::span<const DraftRequest> requests) = 0;
  // The sequence ended or lost its KV (finished, aborted, preempted): drop whatever is kept for it.
  virtual void forget(int64_t /*seq_id*/) {}
};

}  // namespace orchid::engine
