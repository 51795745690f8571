#include "engine/ngram_proposer.h"

#include <algorithm>

#include "core/error.h"

namespace orchid::engine {

NgramProposer::NgramProposer(int32_t min_ngram, int32_t max_ngram)
    : min_ngram_(min_ngram), max_ngram_(max_ngram) {
  if (min_ngram < 1 || max_ngram < min_ngram)
    fail("speculative ngram: prompt_lookup_min {} and prompt_lookup_max {} (need 1 <= min <= max)", min_ngram,
         max_ngram);
}

void NgramProposer::propose(std::span<const DraftRequest> requests) {
  for (const DraftRequest& r : requests) propose_one(r.tokens, r.max_tokens, *r.draft);
}

void NgramProposer::propose_one(std::span<const int32_t> tokens, int32_t max_tokens,
                                std::vector<int32_t>& draft) const {
  const int64_t len = int64_t(tokens.size());
  for (int64_t n = std::min<int64_t>(max_ngram_, len - 1); n >= min_ngram_; --n) {
    const std::span<const int32_t> suffix = tokens.subspan(size_t(len - n));
    // Latest earlier occurrence first: tokens[i, i + n) == suffix with i + n < len.
    for (int64_t i = len - n - 1; i >= 0; --i) {
      if (tokens[size_t(i + n - 1)] != suffix.back() ||
          !std::equal(suffix.begin(), suffix.end() - 1, tokens.begin() + i))
        continue;
      const size_t first = draft.size();
      for (int64_t j = 0; j < max_tokens; ++j) {
        const int64_t from = i + n + j;  // what followed the occurrence, continuing into the proposal
        draft.push_back(from < len ? tokens[size_t(from)] : draft[first + size_t(from - len)]);
      }
      return;
    }
  }
}

}  // namespace orchid::engine
