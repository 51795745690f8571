#include "structured/grammar_body.h"

#include <algorithm>
#include <string_view>

#include <dlpack/dlpack.h>

#include "core/error.h"

namespace orchid::structured {
namespace {

// The closing walk's one-byte tokens. Closers end a string, an object or an array; one counts as closing
// only when no letter may follow it (inside an e-mail address '}' is just a character, and a '"' that
// a letter may follow opens a string). Then what advances formats (an e-mail's '@', a host's '.', a sign),
// the comma that ends a value (before digits, which could lengthen a number forever), letters and digits,
// and what opens new structure last.
constexpr std::string_view kClosers = "\"}]";
constexpr std::string_view kProgress =
    "@.-:,aeioutnsrlcdmhpbfgkvwyxjqzTZABCDEFGHIJKLMNOPQRSUVWXY0123456789\"_+/ [{";

void fill_from_matcher(xgrammar::GrammarMatcher& m, std::span<uint32_t> mask) {
  int64_t shape = int64_t(mask.size());
  DLTensor t{};
  t.data = mask.data();
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = 1;
  t.dtype = DLDataType{kDLInt, 32, 1};
  t.shape = &shape;
  m.FillNextTokenBitmask(&t);
}

void only(std::span<uint32_t> mask, int32_t token) {
  std::fill(mask.begin(), mask.end(), 0u);
  mask[size_t(token) >> 5] = 1u << (uint32_t(token) & 31u);
}

bool probe(xgrammar::GrammarMatcher& m, int32_t token) {
  if (!m.AcceptToken(token)) return false;
  m.Rollback(1);
  return true;
}

}  // namespace

GrammarBody::GrammarBody(std::shared_ptr<GrammarVocabulary> vocab, const xgrammar::CompiledGrammar& grammar,
                         int32_t end_token)
    : vocab_(std::move(vocab)), matcher_(grammar, std::vector<int>{end_token}), end_token_(end_token) {}

int32_t GrammarBody::closing_token(xgrammar::GrammarMatcher& m, std::span<const int32_t> walk) const {
  if (probe(m, end_token_)) return end_token_;
  // A forced stretch (a required key, an enum's tail) goes as the tokenizer would split it.
  const std::string forced = m.FindJumpForwardString();
  if (!forced.empty()) {
    const std::vector<int32_t> ids = vocab_->tokenizer().encode_ordinary(forced);
    if (!ids.empty() && probe(m, ids[0])) return ids[0];
  }
  const int32_t letter = vocab_->byte_token('a');
  for (char c : kClosers) {
    const int32_t id = vocab_->byte_token(static_cast<unsigned char>(c));
    if (!m.AcceptToken(id)) continue;
    const bool closes = !probe(m, letter);
    m.Rollback(1);
    if (closes) return id;
  }
  // What the walk took two tokens ago is skipped once, so that it cannot go round in a loop of two
  // ("a.a.a." where a host wants a longer last label).
  const int32_t avoid = walk.size() >= 2 ? walk[walk.size() - 2] : -1;
  for (int pass = 0; pass < 2; ++pass) {
    for (char c : kProgress) {
      const int32_t id = vocab_->byte_token(static_cast<unsigned char>(c));
      if (pass == 0 && id == avoid) continue;
      if (probe(m, id)) return id;
    }
  }
  // Nothing of the above fits: the lowest id the grammar allows.
  std::vector<uint32_t> mask(size_t(vocab_->mask_words()));
  fill_from_matcher(m, mask);
  for (size_t w = 0; w < mask.size(); ++w)
    if (mask[w]) return int32_t(w * 32 + size_t(__builtin_ctz(mask[w])));
  fail("the grammar allows no token");
}

int32_t GrammarBody::closing_length(int32_t cap) const {
  xgrammar::GrammarMatcher m = matcher_.Fork();
  std::vector<int32_t> walk = walk_;
  for (int32_t n = 1; n <= cap; ++n) {
    const int32_t t = closing_token(m, walk);
    if (t == end_token_) return n;
    if (!m.AcceptToken(t)) fail("the closing walk's token {} was refused", t);
    walk.push_back(t);
  }
  return cap + 1;
}

void GrammarBody::fill_mask(std::span<uint32_t> mask, int32_t remaining) {
  // The walk is measured again only when the budget comes near its last length, or every kRecheck tokens
  // (one token changes a walk's length by a few tokens, not by the margin).
  if (!closing_ && remaining <= kWatch &&
      (last_length_ < 0 || remaining <= last_length_ + kSlack + kRecheck || ++since_check_ >= kRecheck)) {
    last_length_ = closing_length(remaining);
    since_check_ = 0;
    closing_ = last_length_ + kSlack >= remaining;
  }
  if (closing_) {
    only(mask, closing_token(matcher_, walk_));
    return;
  }
  fill_from_matcher(matcher_, mask);
}

bool GrammarBody::accept(int32_t token) {
  if (!matcher_.AcceptToken(token)) return false;
  walk_.push_back(token);
  return true;
}

}  // namespace orchid::structured
