// Prompt lookup (n-gram) proposals: find the sequence's last n tokens earlier in the sequence, longest n
// first (max_ngram down to min_ngram), and propose what followed their latest earlier occurrence. Copying
// runs past the end of the sequence into the proposal itself, so a loop of period p yields a full proposal
// even when p is shorter than it. No model, no state: it pays off on inputs that the output quotes (code
// edits, summaries, retrieval answers) and on repetition.
#pragma once

#include <cstdint>

#include "engine/proposer.h"

namespace orchid::engine {

class NgramProposer final : public Proposer {
 public:
  NgramProposer(int32_t min_ngram, int32_t max_ngram);
  void propose(std::span<const DraftRequest> requests) override;

  // One sequence's proposal (appended to `draft`); exposed for tests.
  void propose_one(std::span<const int32_t> tokens, int32_t max_tokens, std::vector<int32_t>& draft) const;

 private:
  int32_t min_ngram_, max_ngram_;
};

}  // namespace orchid::engine
