#include "tokenizer/hf_tokenizer_files.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string_view>

#include "core/error.h"
#include "core/json_string.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/rank_map.h"

namespace orchid::tokenizer {
namespace {

using nlohmann::ordered_json;

// The roles of the gpt-oss specials, as in the published tokenizer_config.json and in the
// generation_config.json that the synthetic checkpoint writer puts beside it.
constexpr int32_t kBosId = 199998;  // <|startoftext|>
constexpr int32_t kEosId = 200002;  // <|return|>
constexpr int32_t kPadId = 199999;  // <|endoftext|>

// transformers' "no limit" for model_max_length: int(1e30), which the published file spells out in full.
// It does not fit a 64-bit integer, so it is written as text.
constexpr std::string_view kNoMaxLength = "1000000000000000019884624838656";

// Writes one pretty-printed JSON object (two-space indent, as both writers of the published files do) member
// by member, so that the large members can be streamed and the rest come from nlohmann::json.
class PrettyObject {
 public:
  PrettyObject(std::string* out, int depth) : out_(out), depth_(depth) { out_->push_back('{'); }

  // The value's JSON text, already indented for this depth.
  void raw(std::string_view key, std::string_view value) {
    open(key);
    out_->append(value);
  }
  void value(std::string_view key, const ordered_json& v) {
    open(key);
    const std::string text = v.dump(2);
    // Newlines inside JSON strings are escaped, so each raw newline starts a line of the structure.
    for (char c : text) {
      out_->push_back(c);
      if (c == '\n') out_->append(2 * (depth_ + 1), ' ');
    }
  }
  void close() {
    if (members_ > 0) {
      out_->push_back('\n');
      out_->append(2 * depth_, ' ');
    }
    out_->push_back('}');
  }

 private:
  void open(std::string_view key) {
    out_->append(members_++ > 0 ? ",\n" : "\n");
    out_->append(2 * (depth_ + 1), ' ');
    append_json_string(out_, key);
    out_->append(": ");
  }

  std::string* out_;
  int depth_;
  int members_ = 0;
};

std::string vocab_text(const Vocabulary& vocab, int depth) {
  std::string out = "{";
  const std::string pad(2 * (depth + 1), ' ');
  for (int32_t r = 0; r < vocab.rank_count(); ++r) {
    out.append(r > 0 ? ",\n" : "\n");
    out.append(pad);
    append_json_string(&out, to_byte_level(vocab.token(r)));
    out.append(": ");
    out.append(std::to_string(r));
  }
  if (vocab.rank_count() > 0) out.append("\n").append(2 * depth, ' ');
  out.push_back('}');
  return out;
}

std::string merges_text(const Vocabulary& vocab, int depth) {
  const std::vector<Merge> merges = bpe_merges(vocab);
  std::vector<std::string> names(vocab.rank_count());
  for (int32_t r = 0; r < vocab.rank_count(); ++r) {
    std::string name;
    append_json_string(&name, to_byte_level(vocab.token(r)));
    names[r] = std::move(name);
  }
  // Each merge is a two-string array, the form recent tokenizers versions write and the published file has.
  const std::string pad1(2 * (depth + 1), ' '), pad2(2 * (depth + 2), ' ');
  std::string out = "[";
  for (size_t i = 0; i < merges.size(); ++i) {
    out.append(i > 0 ? ",\n" : "\n");
    out.append(pad1).append("[\n");
    out.append(pad2).append(names[merges[i].left]).append(",\n");
    out.append(pad2).append(names[merges[i].right]).append("\n");
    out.append(pad1).append("]");
  }
  if (!merges.empty()) out.append("\n").append(2 * depth, ' ');
  out.push_back(']');
  return out;
}

// An added token's flags: matched anywhere, as written, and skipped by decode(skip_special_tokens=True).
ordered_json::object_t added_token_flags() {
  return {
      {"single_word", false}, {"lstrip", false}, {"rstrip", false}, {"normalized", false}, {"special", true}};
}

const SpecialToken* find_special(const Vocabulary& vocab, int32_t id) {
  for (const SpecialToken& t : vocab.specials) {
    if (t.id == id) return &t;
  }
  return nullptr;
}

void write_file(const std::filesystem::path& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f.write(text.data(), static_cast<std::streamsize>(text.size()));
  if (!f) fail("cannot write '{}'", path.string());
}

}  // namespace

std::vector<Merge> bpe_merges(const Vocabulary& vocab) {
  RankMap ranks;
  const int32_t repeated = ranks.build(vocab.bytes.data(), vocab.offsets.data(), vocab.rank_count());
  if (repeated >= 0) fail("{}: rank {} repeats the bytes of an earlier rank", vocab.source, repeated);
  // Every split, not only the one tiktoken's BPE happens to build a token from: Hugging Face's BPE merges the
  // adjacent pair whose rule comes first, tiktoken the adjacent pair whose concatenation has the lowest rank,
  // whichever two parts make it. With a rule for every split at the token's rank, each adjacent pair of parts
  // gets the priority of its concatenation, as in tiktoken (only two different splits of one token present at
  // once are ordered by left rank instead of position). A piece that is a token itself is taken whole by
  // both: tokenizer.json sets ignore_merges. The published gpt-oss file has exactly this list, in this order.
  std::vector<Merge> merges;
  std::vector<Merge> local;
  for (int32_t r = 0; r < vocab.rank_count(); ++r) {
    const std::string_view token = vocab.token(r);
    local.clear();
    for (size_t i = 1; i < token.size(); ++i) {
      const int32_t left = ranks.find(token.substr(0, i));
      const int32_t right = left < 0 ? -1 : ranks.find(token.substr(i));
      if (right >= 0) local.push_back({left, right});
    }
    std::sort(local.begin(), local.end(), [](const Merge& a, const Merge& b) {
      return a.left != b.left ? a.left < b.left : a.right < b.right;
    });
    merges.insert(merges.end(), local.begin(), local.end());
  }
  return merges;
}

std::vector<SpecialToken> hf_added_tokens(const Vocabulary& vocab) {
  // The published gpt-oss tokenizer.json lists the specials up to the last one with a name of its own
  // (<|endofprompt|>, 200018): the named ones and the reserved ids between them. The other 1069 reserved ids
  // are not in it; orchid's loader restores them from its harmony table, and Hugging Face tokenizers then
  // knows 200019 ids, as with the published file.
  int32_t last_named = -1;
  for (const SpecialToken& t : vocab.specials) {
    if (t.literal != fmt::format("<|reserved_{}|>", t.id)) last_named = std::max(last_named, t.id);
  }
  std::vector<SpecialToken> out;
  for (const SpecialToken& t : vocab.specials) {
    if (t.id <= last_named) out.push_back(t);
  }
  return out;
}

std::string hf_tokenizer_json(const Vocabulary& vocab) {
  ORCHID_CHECK(vocab.rank_count() > 0, "an empty vocabulary");
  ordered_json added = ordered_json::array();
  for (const SpecialToken& t : hf_added_tokens(vocab)) {
    ordered_json entry = {{"id", t.id}, {"content", t.literal}};
    for (auto& [k, v] : added_token_flags()) entry[k] = v;
    added.push_back(std::move(entry));
  }
  // The byte-level steps carry the flags of the published file; in this pipeline (Split first, then ByteLevel
  // without its own regex, no prefix space added when encoding) they change no id.
  const ordered_json byte_level_pre = {
      {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}};
  const ordered_json pre_tokenizer = {{"type", "Sequence"},
                                      {"pretokenizers",
                                       {{{"type", "Split"},
                                         {"pattern", {{"Regex", std::string(kO200kPattern)}}},
                                         {"behavior", "Isolated"},
                                         {"invert", false}},
                                        byte_level_pre}}};
  const ordered_json post_processor = {
      {"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false}, {"use_regex", true}};
  const ordered_json decoder = {
      {"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};

  std::string out;
  out.reserve(28u << 20);
  PrettyObject doc(&out, 0);
  doc.value("version", "1.0");
  doc.value("truncation", nullptr);
  doc.value("padding", nullptr);
  doc.value("added_tokens", added);
  doc.value("normalizer", nullptr);
  doc.value("pre_tokenizer", pre_tokenizer);
  doc.value("post_processor", post_processor);
  doc.value("decoder", decoder);
  std::string model_text;
  PrettyObject model(&model_text, 1);
  model.value("type", "BPE");
  model.value("dropout", nullptr);
  model.value("unk_token", nullptr);
  model.value("continuing_subword_prefix", nullptr);
  model.value("end_of_word_suffix", nullptr);
  model.value("fuse_unk", false);
  model.value("byte_fallback", false);
  model.value("ignore_merges", true);
  model.raw("vocab", vocab_text(vocab, 2));
  model.raw("merges", merges_text(vocab, 2));
  model.close();
  doc.raw("model", model_text);
  doc.close();
  return out;  // no final newline, as tokenizers writes it
}

std::string hf_tokenizer_config_json(const Vocabulary& vocab) {
  // No chat_template: orchid renders conversations with its own Harmony renderer (src/harmony), which is
  // tested against openai-harmony, and the published gpt-oss repositories ship the Jinja template as a
  // separate chat_template.jinja rather than in this file. A template written here would be a second,
  // untested description of the format; transformers' apply_chat_template on such a directory fails with
  // its "no chat template" error instead of rendering something different.
  nlohmann::json decoder_entries = nlohmann::json::object();  // keys sorted, as transformers writes them
  for (const SpecialToken& t : hf_added_tokens(vocab)) {
    nlohmann::json entry = {{"content", t.literal}};
    for (auto& [k, v] : added_token_flags()) entry[k] = v;
    decoder_entries[std::to_string(t.id)] = std::move(entry);
  }
  std::string out;
  PrettyObject doc(&out, 0);
  doc.value("added_tokens_decoder", decoder_entries);
  if (const SpecialToken* t = find_special(vocab, kBosId)) doc.value("bos_token", t->literal);
  doc.value("clean_up_tokenization_spaces", false);
  if (const SpecialToken* t = find_special(vocab, kEosId)) doc.value("eos_token", t->literal);
  doc.value("extra_special_tokens", ordered_json::object());
  doc.value("model_input_names", {"input_ids", "attention_mask"});
  doc.raw("model_max_length", kNoMaxLength);
  if (const SpecialToken* t = find_special(vocab, kPadId)) doc.value("pad_token", t->literal);
  doc.value("tokenizer_class", "PreTrainedTokenizerFast");
  doc.close();
  out.push_back('\n');
  return out;
}

void write_hf_tokenizer_files(const std::string& dir, const Vocabulary& vocab) {
  namespace fs = std::filesystem;
  write_file(fs::path(dir) / "tokenizer.json", hf_tokenizer_json(vocab));
  write_file(fs::path(dir) / "tokenizer_config.json", hf_tokenizer_config_json(vocab));
}

}  // namespace orchid::tokenizer
