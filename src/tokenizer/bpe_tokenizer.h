// The Tokenizer implementation: o200k pre-tokenizer + tiktoken-rule BPE over a Vocabulary.
#pragma once

#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/rank_map.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/vocabulary.h"

namespace orchid::tokenizer {

class BpeTokenizer final : public Tokenizer {
 public:
  // Throws orchid::Error if the vocabulary cannot encode every byte or repeats a token.
  explicit BpeTokenizer(Vocabulary vocab);

  std::vector<int32_t> encode_ordinary(std::string_view text) const override;
  std::vector<int32_t> encode(std::string_view text,
                              const std::unordered_set<std::string>& allowed) const override;
  std::string decode(std::span<const int32_t> ids) const override;
  bool decode_append(int32_t id, std::string* out) const override;
  std::optional<int32_t> special_id(std::string_view literal) const override;
  bool is_special(int32_t id) const override;
  int32_t vocab_size() const override { return vocab_size_; }
  std::unordered_set<std::string> special_literals() const override;

 private:
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };

  void encode_ordinary_into(std::string_view text, std::vector<int32_t>* out) const;
  // The bytes of a known id, or nullptr.
  const std::string* special_literal(int32_t id) const;

  Vocabulary vocab_;
  RankMap ranks_;
  int32_t byte_ranks_[256];
  int32_t rank_count_ = 0;
  int32_t vocab_size_ = 0;
  std::vector<int32_t> special_index_;  // id - rank_count_ -> index into vocab_.specials, or -1
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> special_ids_;
  std::vector<size_t> special_lengths_;  // the distinct literal lengths, longest first
  bool special_first_byte_[256] = {};    // bytes that start some literal
};

}  // namespace orchid::tokenizer
