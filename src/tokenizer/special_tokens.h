// The special tokens of o200k_harmony (spec: harmony.md §1.2): ids 199998..201087 after the 199998 o200k_base
// ranks. Named tokens get their names, every other id `<|reserved_ID|>`; 200018 is `<|endofprompt|>`
// (decoding gives that name) and also answers to `<|reserved_200018|>` when encoding, as in tiktoken.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace orchid::tokenizer {

inline constexpr int32_t kHarmonyFirstSpecialId = 199998;
inline constexpr int32_t kHarmonyVocabSize = 201088;

struct SpecialToken {
  int32_t id;
  std::string literal;
};

// One entry per id, in id order.
std::vector<SpecialToken> harmony_special_tokens();
// Extra literals that encode to an id whose decoded name is another one.
std::vector<SpecialToken> harmony_special_aliases();

}  // namespace orchid::tokenizer
