// Tokenizer factories: the built-in vocabulary, the two file formats, and the choice for a MODEL argument.
#include "tokenizer/tokenizer.h"

#include <filesystem>

#include "core/error.h"
#include "core/parse.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/vocabulary.h"

namespace orchid::tokenizer {

std::shared_ptr<const Tokenizer> Tokenizer::builtin() {
  static const std::shared_ptr<const Tokenizer> tokenizer =
      std::make_shared<const BpeTokenizer>(builtin_vocabulary());
  return tokenizer;
}

std::shared_ptr<const Tokenizer> Tokenizer::from_tiktoken_file(const std::string& path) {
  Vocabulary v = parse_tiktoken_ranks(read_text_file(path, "tiktoken file"), path);
  add_harmony_specials(&v);
  return std::make_shared<const BpeTokenizer>(std::move(v));
}

std::shared_ptr<const Tokenizer> Tokenizer::from_hf_json(const std::string& path) {
  Vocabulary v = parse_hf_tokenizer_json(read_text_file(path, "tokenizer.json"), path);
  add_harmony_specials(&v);
  return std::make_shared<const BpeTokenizer>(std::move(v));
}

std::unordered_set<std::string> Tokenizer::special_literals() const {
  std::unordered_set<std::string> out;
  for (int32_t id = 0; id < vocab_size(); ++id) {
    std::string literal;
    if (is_special(id) && decode_append(id, &literal)) out.insert(std::move(literal));
  }
  return out;
}

std::shared_ptr<const Tokenizer> Tokenizer::for_model(const std::string& model) {
  if (model.rfind("synthetic:", 0) == 0) return builtin();
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(model, ec)) {
    if (fs::exists(model, ec))
      fail("model '{}' is not a directory (expected a Hugging Face model directory)", model);
    fail("model '{}': no such directory (expected a model directory or synthetic:tiny|20b|120b[@seed])",
         model);
  }
  const fs::path json = fs::path(model) / "tokenizer.json";
  if (fs::exists(json, ec)) return from_hf_json(json.string());
  return builtin();
}

}  // namespace orchid::tokenizer
