// What xgrammar needs to know of orchid's tokenizer, built once per tokenizer and shared by every
// structured-output request: the vocabulary as raw bytes per id (special tokens as empty strings, which
// the grammar library never allows inside a grammar), its compiler with a cache of compiled grammars, and
// the masks and ids that the Harmony turn layout uses around the grammars.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include <xgrammar/xgrammar.h>

#include "tokenizer/tokenizer.h"

namespace orchid::structured {

class GrammarVocabulary {
 public:
  // The shared instance for `tok` (built on first use, ~1 s for o200k; thread-safe).
  static std::shared_ptr<GrammarVocabulary> of(std::shared_ptr<const tokenizer::Tokenizer> tok);

  explicit GrammarVocabulary(std::shared_ptr<const tokenizer::Tokenizer> tok);

  const tokenizer::Tokenizer& tokenizer() const { return *tok_; }
  xgrammar::GrammarCompiler& compiler() { return compiler_; }
  int32_t vocab_size() const { return vocab_size_; }
  int32_t mask_words() const { return (vocab_size_ + 31) / 32; }
  // Every ordinary (non-special) token: what free text may use.
  const std::vector<uint32_t>& text_mask() const { return text_mask_; }
  // The id of the one-byte token for ASCII byte b (byte-level BPE has one for every byte); -1 above 127.
  int32_t byte_token(unsigned char b) const { return byte_tokens_[b]; }
  // The special token's id; throws when the tokenizer has none.
  int32_t special(std::string_view literal) const;

 private:
  std::shared_ptr<const tokenizer::Tokenizer> tok_;
  int32_t vocab_size_ = 0;
  xgrammar::TokenizerInfo info_;
  xgrammar::GrammarCompiler compiler_;
  std::vector<uint32_t> text_mask_;
  std::array<int32_t, 256> byte_tokens_{};
};

}  // namespace orchid::structured
