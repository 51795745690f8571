// One grammar-constrained part of an output (the final answer, a tool call's arguments, a whole raw
// completion) followed by the token that ends it. Sampling is free within the grammar's mask until the
// budget gets tight; from then on it is closed: each step allows only the one token that a fixed closing
// walk takes (closing quotes and brackets first, then the characters that move formats forward), always
// within the grammar's mask, so the value is complete before the budget ends. Whether it is tight is
// measured by running that walk on a copy of the matcher, only within the last kWatch tokens. The walk is
// a heuristic over one-byte tokens (see kClosers/kProgress), not a shortest-path search: grammars that it
// cannot close within kWatch tokens (say, a long mandatory pattern) may still run out of budget.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include <xgrammar/xgrammar.h>

#include "structured/grammar_vocabulary.h"

namespace orchid::structured {

class GrammarBody {
 public:
  // Tokens before the end of the budget at which closing walks start being measured, and the slack kept
  // beyond a walk's length (one sampled token can open structure that a walk then has to close).
  static constexpr int32_t kWatch = 160;
  static constexpr int32_t kSlack = 24;
  static constexpr int32_t kRecheck = 8;

  GrammarBody(std::shared_ptr<GrammarVocabulary> vocab, const xgrammar::CompiledGrammar& grammar,
              int32_t end_token);

  // `remaining` counts the end token too.
  void fill_mask(std::span<uint32_t> mask, int32_t remaining);
  bool accept(int32_t token);
  // The end token was accepted.
  bool finished() const { return matcher_.IsTerminated(); }
  bool closing() const { return closing_; }

  // The closing walk's next token from the matcher's state, after `walk` (the tokens so far).
  int32_t closing_token(xgrammar::GrammarMatcher& m, std::span<const int32_t> walk) const;
  // Tokens the closing walk needs from the current state to the end token included, capped at cap + 1.
  int32_t closing_length(int32_t cap) const;

 private:
  std::shared_ptr<GrammarVocabulary> vocab_;
  xgrammar::GrammarMatcher matcher_;
  int32_t end_token_;
  bool closing_ = false;
  int32_t last_length_ = -1, since_check_ = 0;  // the last measured walk, tokens since
  std::vector<int32_t> walk_;                   // the tokens accepted so far
};

}  // namespace orchid::structured
