// What a byte-level BPE tokenizer is made of, as the file loaders produce it: the byte strings of ranks
// 0..n-1 (a token's id is its rank) and special tokens at ids >= n.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/special_tokens.h"

namespace orchid::tokenizer {

struct Vocabulary {
  std::string bytes;                   // the bytes of ranks 0..n-1, back to back
  std::vector<uint32_t> offsets;       // n + 1 entries: rank r is bytes[offsets[r], offsets[r+1])
  std::vector<SpecialToken> specials;  // ids >= n, increasing; the literal is what decoding gives
  std::vector<SpecialToken> aliases;   // more literals that encode to a special id
  std::string source;                  // file name, for messages

  int32_t rank_count() const { return static_cast<int32_t>(offsets.size()) - 1; }
  std::string_view token(int32_t rank) const {
    return std::string_view(bytes).substr(offsets[rank], offsets[rank + 1] - offsets[rank]);
  }
};

// A `.tiktoken` file: one `base64(bytes) rank` per line. Ranks must be 0..n-1, each once.
Vocabulary parse_tiktoken_ranks(std::string_view text, const std::string& source);

// A Hugging Face tokenizer.json of a byte-level BPE with o200k's pre-tokenizer: model.vocab gives the ranks
// (merges are implied by them), added_tokens the special tokens.
Vocabulary parse_hf_tokenizer_json(std::string_view json_text, const std::string& source);

// The vocabulary shipped with orchid: the embedded o200k_base ranks plus the o200k_harmony specials.
Vocabulary builtin_vocabulary();

// Adds the o200k_harmony special tokens whose id and literal are both still free, so that a vocabulary from
// either file format ends with the same 201088 ids.
void add_harmony_specials(Vocabulary* vocab);

}  // namespace orchid::tokenizer
