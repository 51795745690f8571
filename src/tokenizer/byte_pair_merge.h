// Byte-pair encoding of one pre-token piece with tiktoken's rule: keep merging the adjacent pair of parts
// whose concatenation has the lowest rank (the leftmost on ties) until no concatenation is in the vocabulary.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "tokenizer/rank_map.h"

namespace orchid::tokenizer {

// Appends the ids of `piece` (at least 2 bytes, not itself a token) to `out`. byte_ranks[b] is the rank of
// the single byte b; every byte must have one.
void byte_pair_merge(std::string_view piece, const RankMap& ranks, const int32_t* byte_ranks,
                     std::vector<int32_t>* out);

}  // namespace orchid::tokenizer
