// Speculative decoding settings (`--speculative-config`, the JSON object vLLM takes) and the proposer they
// select.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "engine/proposer.h"

namespace orchid::engine {

struct SpeculativeConfig {
  std::string method;  // "" (off), "ngram", "draft_model" or "eagle3"
  // draft_model: the draft checkpoint (same vocabulary as the target); eagle3: the head (a directory in the
  // published layout, or synthetic[@seed]), which the backend loads next to the target.
  std::string model;
  int32_t num_speculative_tokens = 0;                    // drafts per sequence and step, at most
  int32_t prompt_lookup_min = 2, prompt_lookup_max = 4;  // ngram: match lengths tried, longest first

  bool enabled() const { return !method.empty() && num_speculative_tokens > 0; }
};

// The proposer of an enabled config; throws orchid::Error for an unknown method or bad numbers. A draft
// model needs a backend, which its caller loads (DraftModelProposer, EngineConfig::proposer).
std::unique_ptr<Proposer> make_proposer(const SpeculativeConfig& config);

}  // namespace orchid::engine
