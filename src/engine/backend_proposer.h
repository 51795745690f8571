// Proposals that the backend makes itself (an EAGLE-3 head next to the target, Backend::max_proposals):
// every step asks each sampled sequence's head for up to k tokens to follow its last sample
// (StepSequence::num_propose), the step's output carries them, and they become the next step's drafts. The
// head reads the target's hidden states of the very step, so nothing runs between steps and no state but the
// tokens themselves is kept here.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "engine/proposer.h"

namespace orchid::engine {

class BackendProposer final : public Proposer {
 public:
  explicit BackendProposer(int32_t num_propose) : num_propose_(num_propose) {}
  int32_t num_propose() const { return num_propose_; }

  // Hands back what was stored for each sequence, if it was made for the sequence as it is now.
  void propose(std::span<const DraftRequest> requests) override;
  void forget(int64_t seq_id) override { stored_.erase(seq_id); }
  // A step's proposals for a sequence of `length` tokens (its samples of that step included).
  void store(int64_t seq_id, int32_t length, std::span<const int32_t> tokens);
  size_t num_tracked() const { return stored_.size(); }

 private:
  struct Stored {
    int32_t length = 0;
    std::vector<int32_t> tokens;
  };
  int32_t num_propose_;
  std::unordered_map<int64_t, Stored> stored_;
};

}  // namespace orchid::engine
