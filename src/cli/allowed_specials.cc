#include "cli/allowed_specials.h"

#include "core/error.h"

namespace orchid::cli {

std::unordered_set<std::string> allowed_specials(const tokenizer::Tokenizer& tok, const std::string& spec) {
  if (spec.empty() || spec == "none") return {};
  if (spec == "all") return tok.special_literals();
  std::unordered_set<std::string> out;
  for (size_t pos = 0; pos <= spec.size();) {
    size_t comma = spec.find(',', pos);
    if (comma == std::string::npos) comma = spec.size();
    std::string literal = spec.substr(pos, comma - pos);
    if (!tok.special_id(literal))
      fail("--allow-special: '{}' is not a special token of this tokenizer", literal);
    out.insert(std::move(literal));
    pos = comma + 1;
  }
  return out;
}

}  // namespace orchid::cli
