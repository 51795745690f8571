// The o200k_harmony tokenizer: byte-level BPE over the o200k_base ranks plus gpt-oss's special tokens
// (201088 ids). Contract shared by the Harmony layer, the server and the CLI; thread-safe once built.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

namespace orchid::tokenizer {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // The vocabulary shipped with orchid (o200k_base ranks + the o200k_harmony specials).
  static std::shared_ptr<const Tokenizer> builtin();
  static std::shared_ptr<const Tokenizer> from_tiktoken_file(const std::string& path);
  static std::shared_ptr<const Tokenizer> from_hf_json(const std::string& path);
  // A model argument: `synthetic:*` -> builtin(); a directory -> its tokenizer.json if present, else
  // builtin().
  static std::shared_ptr<const Tokenizer> for_model(const std::string& model);

  // Special-token literals in `text` stay plain text.
  virtual std::vector<int32_t> encode_ordinary(std::string_view text) const = 0;
  // Special-token literals named in `allowed` become their ids; all others stay plain text.
  virtual std::vector<int32_t> encode(std::string_view text,
                                      const std::unordered_set<std::string>& allowed) const = 0;
  // Raw bytes of the ids (special ids give their literal text). Throws orchid::Error on an unknown id.
  virtual std::string decode(std::span<const int32_t> ids) const = 0;
  // Appends the bytes of one id; false (nothing appended) if the id is unknown.
  virtual bool decode_append(int32_t id, std::string* out) const = 0;

  virtual std::optional<int32_t> special_id(std::string_view literal) const = 0;  // e.g. "<|start|>"
  virtual bool is_special(int32_t id) const = 0;
  virtual int32_t vocab_size() const = 0;  // 201088 for o200k_harmony

  // Every literal that special_id() knows (for "allow all specials"). The default lists the decoded names of
  // the special ids; implementations with extra names for an id add them.
  virtual std::unordered_set<std::string> special_literals() const;
};

}  // namespace orchid::tokenizer
