// The TokenConstraint of a structured-output request: the layout of the assistant's turn, with grammars
// where the request asked for them.
//
// Harmony (chat, Responses): the turn opens with an analysis message whose text is free but bounded by a
// reasoning budget (after it, or after an early <|end|>, the turn goes on with "<|start|>assistant
// <|channel|>"), then exactly one of the request's branches: the final answer ("final<|message|>", its
// text under the response format's grammar or free, then <|return|>) or a call of one of the tools
// ("commentary to=functions.NAME <|constrain|>json<|message|>", arguments under the tool's schema, then
// <|call|>). Header tokens are forced or chosen among the branches' headers only, so even a model with
// random weights produces a well-formed turn.
//
// Raw completions: no layout, one branch with an empty header, the grammar over the whole output.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include <xgrammar/xgrammar.h>

#include "engine/token_constraint.h"
#include "structured/grammar_body.h"
#include "structured/grammar_vocabulary.h"

namespace orchid::structured {

struct TurnBranch {
  std::vector<int32_t> header;                       // tokens that open this branch (prefix-free)
  std::optional<xgrammar::CompiledGrammar> grammar;  // none: free text
  int32_t end_token = -1;                            // <|return|>, <|call|>, or the model's EOS
};

struct TurnLayout {
  // Analysis message (Harmony): its header ("<|channel|>analysis<|message|>"), the token that ends it
  // (<|end|>), the tokens that reopen the turn afterwards ("<|start|>assistant<|channel|>") and its budget.
  bool analysis = false;
  std::vector<int32_t> analysis_header, analysis_reopen;
  int32_t analysis_end = -1;
  int32_t reasoning_budget = 0;
  std::vector<TurnBranch> branches;
};

// The default reasoning budget of a structured-output request, in tokens (a request's
// `reasoning.max_tokens` overrides it). It is further held to half of what the output budget leaves.
inline constexpr int32_t kDefaultReasoningBudget = 256;

class TurnConstraint final : public engine::TokenConstraint {
 public:
  TurnConstraint(std::shared_ptr<GrammarVocabulary> vocab, std::shared_ptr<const TurnLayout> layout);

  void fill_mask(std::span<uint32_t> mask, int32_t remaining) override;
  bool accept(int32_t token) override;

 private:
  enum class Phase { kForced, kAnalysis, kChoose, kFreeBody, kGrammarBody, kDone };
  void after_forced();
  void enter_branch(size_t b);
  void fill(std::span<uint32_t> mask, int32_t remaining);

  std::shared_ptr<GrammarVocabulary> vocab_;
  std::shared_ptr<const TurnLayout> layout_;
  Phase phase_ = Phase::kForced;
  std::vector<int32_t> forced_;  // what kForced still has to emit
  size_t forced_pos_ = 0;
  Phase after_forced_ = Phase::kChoose;
  int32_t analysis_tokens_ = 0, analysis_limit_ = -1;
  std::vector<int32_t> chosen_;  // header tokens taken in kChoose
  size_t branch_ = 0;
  std::unique_ptr<GrammarBody> body_;
  std::vector<uint32_t> scratch_;
};

}  // namespace orchid::structured
