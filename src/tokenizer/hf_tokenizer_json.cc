#include <nlohmann/json.hpp>

#include <algorithm>
#include <unordered_set>

#include "core/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/utf8.h"
#include "tokenizer/vocabulary.h"

namespace orchid::tokenizer {
namespace {

using nlohmann::json;

// Ids index dense tables, so a stray huge id in a file must not size them.
constexpr int64_t kMaxTokenId = int64_t{1} << 24;

// Finds the Split pre-tokenizer's regex anywhere under `node`.
void collect_patterns(const json& node, std::vector<std::string>* out) {
  if (node.is_object()) {
    auto it = node.find("pattern");
    if (it != node.end() && it->is_object() && it->contains("Regex") && (*it)["Regex"].is_string()) {
      out->push_back((*it)["Regex"].get<std::string>());
    }
    for (const auto& [k, v] : node.items()) collect_patterns(v, out);
  } else if (node.is_array()) {
    for (const auto& v : node) collect_patterns(v, out);
  }
}

}  // namespace

Vocabulary parse_hf_tokenizer_json(std::string_view json_text, const std::string& source) {
  // The merges list (the bulk of the file) is redundant with the ranks; skipping it halves the parse.
  json::parser_callback_t skip_merges = [](int depth, json::parse_event_t event, json& parsed) {
    return !(depth == 2 && event == json::parse_event_t::key && parsed == "merges");
  };
  json doc;
  try {
    doc = json::parse(json_text.begin(), json_text.end(), skip_merges);
  } catch (const json::exception& e) {
    fail("{}: not valid JSON: {}", source, e.what());
  }
  if (!doc.is_object() || !doc.contains("model") || !doc["model"].is_object())
    fail("{}: no 'model' object", source);
  const json& model = doc["model"];
  if (model.contains("type") && model["type"] != "BPE") {
    fail("{}: model.type is {}, only byte-level BPE is supported", source, model["type"].dump());
  }
  std::vector<std::string> patterns;
  if (doc.contains("pre_tokenizer")) collect_patterns(doc["pre_tokenizer"], &patterns);
  if (patterns.size() != 1 || patterns[0] != kO200kPattern) {
    fail("{}: pre_tokenizer must be a Split on o200k's regex (the only pre-tokenizer orchid implements)",
         source);
  }
  if (!model.contains("vocab") || !model["vocab"].is_object()) fail("{}: no model.vocab object", source);

  const auto& to_byte = byte_level_bytes();
  const json& vocab = model["vocab"];
  std::vector<std::pair<int64_t, std::string>> entries;
  entries.reserve(vocab.size());
  for (const auto& [key, value] : vocab.items()) {
    if (!value.is_number_integer()) fail("{}: model.vocab['{}'] is not an integer id", source, key);
    std::string bytes;
    auto* s = reinterpret_cast<const unsigned char*>(key.data());
    for (size_t i = 0; i < key.size();) {
      Utf8Step st = read_utf8(s + i, key.size() - i);
      if (st.status != Utf8Step::kValid || st.cp >= to_byte.size() || to_byte[st.cp] < 0) {
        fail("{}: model.vocab key '{}' is not in the byte-level alphabet", source, key);
      }
      bytes.push_back(static_cast<char>(to_byte[st.cp]));
      i += st.len;
    }
    entries.emplace_back(value.get<int64_t>(), std::move(bytes));
  }
  std::sort(entries.begin(), entries.end());
  Vocabulary v;
  v.source = source;
  for (size_t i = 0; i < entries.size(); ++i) {
    if (entries[i].first != static_cast<int64_t>(i)) {
      fail("{}: model.vocab ids must be 0..{} with each used once; id {} is {}", source, entries.size() - 1,
           i, entries[i].first > static_cast<int64_t>(i) ? "missing" : "repeated");
    }
    v.offsets.push_back(static_cast<uint32_t>(v.bytes.size()));
    v.bytes += entries[i].second;
  }
  v.offsets.push_back(static_cast<uint32_t>(v.bytes.size()));
  if (v.rank_count() == 0) fail("{}: model.vocab is empty", source);

  if (doc.contains("added_tokens")) {
    if (!doc["added_tokens"].is_array()) fail("{}: added_tokens is not an array", source);
    std::unordered_set<std::string> seen;
    for (const json& t : doc["added_tokens"]) {
      if (!t.is_object() || !t.contains("id") || !t["id"].is_number_integer() || !t.contains("content") ||
          !t["content"].is_string()) {
        fail("{}: added_tokens entries need an integer 'id' and a string 'content'", source);
      }
      const int64_t id = t["id"].get<int64_t>();
      std::string content = t["content"].get<std::string>();
      if (id < v.rank_count() || id >= kMaxTokenId) {
        fail("{}: added token {} has id {}, expected one above the BPE ranks and below {}", source, content,
             id, kMaxTokenId);
      }
      if (content.empty() || !seen.insert(content).second) {
        fail("{}: added token id {} has an empty or repeated content", source, id);
      }
      v.specials.push_back({static_cast<int32_t>(id), std::move(content)});
    }
    std::sort(v.specials.begin(), v.specials.end(),
              [](const SpecialToken& a, const SpecialToken& b) { return a.id < b.id; });
    for (size_t i = 1; i < v.specials.size(); ++i) {
      if (v.specials[i].id == v.specials[i - 1].id)
        fail("{}: two added tokens have id {}", source, v.specials[i].id);
    }
  }
  return v;
}

}  // namespace orchid::tokenizer
