#include "engine/speculative_config.h"

#include "core/error.h"
#include "engine/ngram_proposer.h"

namespace orchid::engine {

std::unique_ptr<Proposer> make_proposer(const SpeculativeConfig& c) {
  if (c.num_speculative_tokens < 1 || c.num_speculative_tokens > 16)
    fail("speculative decoding: num_speculative_tokens {} (must be 1..16)", c.num_speculative_tokens);
  if (c.method == "ngram") return std::make_unique<NgramProposer>(c.prompt_lookup_min, c.prompt_lookup_max);
  if (c.method == "draft_model") fail("speculative decoding: draft_model: the draft model was not loaded");
  if (c.method == "eagle3")
    fail("speculative decoding: eagle3: the head is the backend's (Engine makes its proposer)");
  fail("speculative decoding: unknown method '{}' (available: ngram, draft_model, eagle3)", c.method);
}

}  // namespace orchid::engine
