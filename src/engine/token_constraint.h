// A per-request limit on which tokens may be generated next (structured outputs: a grammar, a Harmony turn
// layout). The engine asks it for an allowed-token bitmask before each sampled token of its request and
// tells it every token sampled. fill_mask runs on the engine's mask worker while the model computes the
// step; accept runs on the engine thread after it; the two never overlap for one request.
//
// Preemption needs nothing from a constraint: a preempted request keeps its tokens and only recomputes
// their K/V, so the tokens a constraint has accepted stay the request's output.
#pragma once

#include <cstdint>
#include <span>

namespace orchid::engine {

class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // Writes the tokens allowed next into `mask` (StepBatch::token_masks' row layout: token t allowed iff bit
  // t % 32 of word t / 32 is set; every word is written). `remaining` is how many tokens the request may
  // still generate, this one included (max_tokens or the context, whichever ends first), so a constraint
  // can close its structure in time.
  virtual void fill_mask(std::span<uint32_t> mask, int32_t remaining) = 0;
  // The token sampled from the last mask. False when the constraint rejects it (the backend ignored the
  // mask): the request then fails.
  virtual bool accept(int32_t token) = 0;
};

}  // namespace orchid::engine
