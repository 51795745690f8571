#include "tokenizer/vocabulary.h"

#include <algorithm>
#include <unordered_set>

#include "tokenizer/embedded_vocab.h"

namespace orchid::tokenizer {

Vocabulary builtin_vocabulary() {
  Vocabulary v = parse_tiktoken_ranks(embedded_o200k_base(), "built-in o200k_base.tiktoken");
  add_harmony_specials(&v);
  return v;
}

void add_harmony_specials(Vocabulary* vocab) {
  std::unordered_set<int32_t> ids;
  std::unordered_set<std::string> literals;
  for (const SpecialToken& t : vocab->specials) ids.insert(t.id), literals.insert(t.literal);
  for (const SpecialToken& t : vocab->aliases) literals.insert(t.literal);
  for (SpecialToken& t : harmony_special_tokens()) {
    if (t.id < vocab->rank_count() || ids.count(t.id) || literals.count(t.literal)) continue;
    ids.insert(t.id);
    literals.insert(t.literal);
    vocab->specials.push_back(std::move(t));
  }
  for (SpecialToken& t : harmony_special_aliases()) {
    if (!literals.count(t.literal) && ids.count(t.id)) vocab->aliases.push_back(std::move(t));
  }
  std::sort(vocab->specials.begin(), vocab->specials.end(),
            [](const SpecialToken& a, const SpecialToken& b) { return a.id < b.id; });
}

}  // namespace orchid::tokenizer
