#include "engine/backend_proposer.h"

#include <algorithm>

namespace orchid::engine {

void BackendProposer::propose(std::span<const DraftRequest> requests) {
  for (const DraftRequest& r : requests) {
    const auto it = stored_.find(r.seq_id);
    // Made after another history (the sequence was preempted and recomputed, or its tokens were cut): stale.
    if (it == stored_.end() || it->second.length != int32_t(r.tokens.size())) continue;
    const auto& t = it->second.tokens;
    r.draft->insert(r.draft->end(), t.begin(),
                    t.begin() + std::min<ptrdiff_t>(r.max_tokens, ptrdiff_t(t.size())));
  }
}

void BackendProposer::store(int64_t seq_id, int32_t length, std::span<const int32_t> tokens) {
  Stored& s = stored_[seq_id];
  s.length = length;
  s.tokens.assign(tokens.begin(), tokens.end());
}

}  // namespace orchid::engine
