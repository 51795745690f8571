#include "tokenizer/bpe_tokenizer.h"

#include <algorithm>

#include "core/error.h"
#include "tokenizer/byte_pair_merge.h"
#include "tokenizer/pretokenizer.h"

namespace orchid::tokenizer {

BpeTokenizer::BpeTokenizer(Vocabulary vocab) : vocab_(std::move(vocab)) {
  rank_count_ = vocab_.rank_count();
  const int32_t repeated = ranks_.build(vocab_.bytes.data(), vocab_.offsets.data(), rank_count_);
  if (repeated >= 0) fail("{}: rank {} repeats the bytes of an earlier rank", vocab_.source, repeated);
  for (int b = 0; b < 256; ++b) {
    const char c = static_cast<char>(b);
    byte_ranks_[b] = ranks_.find(&c, 1);
    if (byte_ranks_[b] < 0)
      fail("{}: no token for the single byte 0x{:02X}; byte-level BPE needs all 256", vocab_.source, b);
  }
  vocab_size_ = rank_count_;
  for (const SpecialToken& t : vocab_.specials) vocab_size_ = std::max(vocab_size_, t.id + 1);
  special_index_.assign(vocab_size_ - rank_count_, -1);
  for (size_t i = 0; i < vocab_.specials.size(); ++i) {
    const SpecialToken& t = vocab_.specials[i];
    ORCHID_CHECK(t.id >= rank_count_, "special id {} overlaps the ranks", t.id);
    special_index_[t.id - rank_count_] = static_cast<int32_t>(i);
    special_ids_.emplace(t.literal, t.id);
  }
  for (const SpecialToken& t : vocab_.aliases) special_ids_.emplace(t.literal, t.id);
  for (const auto& [literal, id] : special_ids_) {
    special_first_byte_[static_cast<unsigned char>(literal[0])] = true;
    if (std::find(special_lengths_.begin(), special_lengths_.end(), literal.size()) ==
        special_lengths_.end()) {
      special_lengths_.push_back(literal.size());
    }
  }
  std::sort(special_lengths_.rbegin(), special_lengths_.rend());
}

void BpeTokenizer::encode_ordinary_into(std::string_view text, std::vector<int32_t>* out) const {
  for (size_t p = 0; p < text.size();) {
    const size_t e = o200k_piece_end(text, p);
    std::string_view piece = text.substr(p, e - p);
    p = e;
    if (piece.size() == 1) {
      out->push_back(byte_ranks_[static_cast<unsigned char>(piece[0])]);
      continue;
    }
    const int32_t whole = ranks_.find(piece);
    if (whole >= 0) {
      out->push_back(whole);
    } else {
      byte_pair_merge(piece, ranks_, byte_ranks_, out);
    }
  }
}

std::vector<int32_t> BpeTokenizer::encode_ordinary(std::string_view text) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  encode_ordinary_into(text, &out);
  return out;
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text,
                                          const std::unordered_set<std::string>& allowed) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  if (allowed.empty()) {
    encode_ordinary_into(text, &out);
    return out;
  }
  size_t done = 0;  // text[0, done) is encoded
  for (size_t p = 0; p < text.size(); ++p) {
    if (!special_first_byte_[static_cast<unsigned char>(text[p])]) continue;
    // Leftmost match wins; at one position the longest literal.
    for (size_t len : special_lengths_) {
      if (len > text.size() - p) continue;
      auto it = special_ids_.find(text.substr(p, len));
      if (it == special_ids_.end() || !allowed.count(it->first)) continue;
      encode_ordinary_into(text.substr(done, p - done), &out);
      out.push_back(it->second);
      done = p + len;
      p = done - 1;
      break;
    }
  }
  encode_ordinary_into(text.substr(done), &out);
  return out;
}

const std::string* BpeTokenizer::special_literal(int32_t id) const {
  if (id < rank_count_ || id >= vocab_size_) return nullptr;
  const int32_t i = special_index_[id - rank_count_];
  return i < 0 ? nullptr : &vocab_.specials[i].literal;
}

bool BpeTokenizer::decode_append(int32_t id, std::string* out) const {
  if (id >= 0 && id < rank_count_) {
    out->append(vocab_.bytes, vocab_.offsets[id], vocab_.offsets[id + 1] - vocab_.offsets[id]);
    return true;
  }
  const std::string* literal = special_literal(id);
  if (literal == nullptr) return false;
  out->append(*literal);
  return true;
}

std::string BpeTokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  for (int32_t id : ids) {
    if (!decode_append(id, &out))
      fail("cannot decode token id {}: not in the vocabulary (0..{})", id, vocab_size_ - 1);
  }
  return out;
}

std::optional<int32_t> BpeTokenizer::special_id(std::string_view literal) const {
  auto it = special_ids_.find(literal);
  if (it == special_ids_.end()) return std::nullopt;
  return it->second;
}

std::unordered_set<std::string> BpeTokenizer::special_literals() const {
  std::unordered_set<std::string> out;
  for (const auto& [literal, id] : special_ids_) out.insert(literal);
  return out;
}

bool BpeTokenizer::is_special(int32_t id) const {
  return special_literal(id) != nullptr;
}

}  // namespace orchid::tokenizer
