#include "tokenizer/special_tokens.h"

#include <fmt/format.h>

#include <string_view>
#include <utility>

namespace orchid::tokenizer {
namespace {

constexpr std::pair<int32_t, std::string_view> kNamed[] = {
    {199998, "<|startoftext|>"}, {199999, "<|endoftext|>"}, {200002, "<|return|>"},
    {200003, "<|constrain|>"},   {200005, "<|channel|>"},   {200006, "<|start|>"},
    {200007, "<|end|>"},         {200008, "<|message|>"},   {200012, "<|call|>"},
    {200018, "<|endofprompt|>"},
};

std::string reserved_name(int32_t id) {
  return fmt::format("<|reserved_{}|>", id);
}

}  // namespace

std::vector<SpecialToken> harmony_special_tokens() {
  std::vector<SpecialToken> out;
  out.reserve(kHarmonyVocabSize - kHarmonyFirstSpecialId);
  for (int32_t id = kHarmonyFirstSpecialId; id < kHarmonyVocabSize; ++id)
    out.push_back({id, reserved_name(id)});
  for (const auto& [id, name] : kNamed) out[id - kHarmonyFirstSpecialId].literal = name;
  return out;
}

std::vector<SpecialToken> harmony_special_aliases() {
  return {{200018, reserved_name(200018)}};
}

}  // namespace orchid::tokenizer
