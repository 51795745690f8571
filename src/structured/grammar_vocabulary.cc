#include "structured/grammar_vocabulary.h"

#include <map>
#include <mutex>
#include <thread>

#include "core/error.h"

namespace orchid::structured {
namespace {

xgrammar::TokenizerInfo tokenizer_info(const tokenizer::Tokenizer& tok) {
  std::vector<std::string> vocab(size_t(tok.vocab_size()));
  for (int32_t id = 0; id < tok.vocab_size(); ++id)
    if (!tok.is_special(id)) tok.decode_append(id, &vocab[size_t(id)]);
  // No stop tokens here: each matcher names its own (the token that ends its part of the turn).
  return xgrammar::TokenizerInfo(vocab, xgrammar::VocabType::RAW, tok.vocab_size(), std::vector<int32_t>{});
}

}  // namespace

std::shared_ptr<GrammarVocabulary> GrammarVocabulary::of(std::shared_ptr<const tokenizer::Tokenizer> tok) {
  static std::mutex mu;
  static std::map<const tokenizer::Tokenizer*, std::weak_ptr<GrammarVocabulary>> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = cache[tok.get()];
  if (auto v = slot.lock()) return v;
  auto v = std::make_shared<GrammarVocabulary>(std::move(tok));
  slot = v;
  return v;
}

GrammarVocabulary::GrammarVocabulary(std::shared_ptr<const tokenizer::Tokenizer> tok)
    : tok_(std::move(tok)),
      vocab_size_(tok_->vocab_size()),
      info_(tokenizer_info(*tok_)),
      compiler_(info_, int(std::max(1u, std::thread::hardware_concurrency())), /*cache_enabled=*/true,
                /*max_memory_bytes=*/int64_t(256) << 20) {
  text_mask_.assign(size_t(mask_words()), 0u);
  for (int32_t id = 0; id < vocab_size_; ++id)
    if (!tok_->is_special(id)) text_mask_[size_t(id) >> 5] |= 1u << (uint32_t(id) & 31u);
  byte_tokens_.fill(-1);
  for (int b = 0; b < 128; ++b) {
    const std::vector<int32_t> ids = tok_->encode_ordinary(std::string(1, char(b)));
    ORCHID_CHECK(ids.size() == 1, "byte {} is not one token", b);
    byte_tokens_[size_t(b)] = ids[0];
  }
}

int32_t GrammarVocabulary::special(std::string_view literal) const {
  const auto id = tok_->special_id(literal);
  if (!id) fail("the tokenizer has no {} token", literal);
  return *id;
}

}  // namespace orchid::structured
