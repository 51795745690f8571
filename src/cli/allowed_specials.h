// The --allow-special flag of the commands that encode text (tokenize, generate): which special-token
// literals in the text become special ids. Everything else is encoded as ordinary text, as the Harmony
// renderer does.
#pragma once

#include <string>
#include <unordered_set>

#include "tokenizer/tokenizer.h"

namespace orchid::cli {

inline constexpr const char* kAllowSpecialHelp =
    "Special-token literals to encode as special ids: none (default), all, or a comma list";

// "" or "none" -> {}, "all" -> every literal of the tokenizer, else a comma list of literals it knows.
std::unordered_set<std::string> allowed_specials(const tokenizer::Tokenizer& tok, const std::string& spec);

}  // namespace orchid::cli
