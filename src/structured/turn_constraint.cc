#include "structured/turn_constraint.h"

#include <algorithm>

#include "core/error.h"

namespace orchid::structured {
namespace {

void allow(std::span<uint32_t> mask, int32_t token) {
  mask[size_t(token) >> 5] |= 1u << (uint32_t(token) & 31u);
}

void only(std::span<uint32_t> mask, int32_t token) {
  std::fill(mask.begin(), mask.end(), 0u);
  allow(mask, token);
}

bool allowed(std::span<const uint32_t> mask, int32_t token) {
  return (mask[size_t(token) >> 5] >> (uint32_t(token) & 31u)) & 1u;
}

}  // namespace

TurnConstraint::TurnConstraint(std::shared_ptr<GrammarVocabulary> vocab,
                               std::shared_ptr<const TurnLayout> layout)
    : vocab_(std::move(vocab)), layout_(std::move(layout)) {
  ORCHID_CHECK(!layout_->branches.empty(), "a turn layout without branches");
  if (layout_->analysis) {
    forced_ = layout_->analysis_header;
    after_forced_ = Phase::kAnalysis;
  }
  after_forced();
}

void TurnConstraint::after_forced() {
  if (forced_pos_ < forced_.size()) {
    phase_ = Phase::kForced;
    return;
  }
  forced_.clear();
  forced_pos_ = 0;
  phase_ = after_forced_;
  if (phase_ == Phase::kChoose && layout_->branches.size() == 1 && layout_->branches[0].header.empty())
    enter_branch(0);
}

void TurnConstraint::enter_branch(size_t b) {
  branch_ = b;
  const TurnBranch& br = layout_->branches[b];
  if (br.grammar) {
    body_ = std::make_unique<GrammarBody>(vocab_, *br.grammar, br.end_token);
    phase_ = Phase::kGrammarBody;
  } else {
    phase_ = Phase::kFreeBody;
  }
}

void TurnConstraint::fill_mask(std::span<uint32_t> mask, int32_t remaining) {
  // The model's vocabulary may be padded beyond the tokenizer's: those ids are never allowed.
  scratch_.assign(size_t(vocab_->mask_words()), 0u);
  fill(scratch_, remaining);
  std::fill(mask.begin(), mask.end(), 0u);
  std::copy_n(scratch_.begin(), std::min(mask.size(), scratch_.size()), mask.begin());
}

void TurnConstraint::fill(std::span<uint32_t> mask, int32_t remaining) {
  switch (phase_) {
    case Phase::kForced:
      only(mask, forced_[forced_pos_]);
      return;
    case Phase::kAnalysis: {
      if (analysis_limit_ < 0) {
        // Keeps at least half of what is left, beyond the headers, for the answer.
        const int32_t headers = int32_t(layout_->analysis_reopen.size()) + 24;
        analysis_limit_ = std::clamp((remaining - headers) / 2, 0, layout_->reasoning_budget);
      }
      if (analysis_tokens_ >= analysis_limit_) {
        only(mask, layout_->analysis_end);
        return;
      }
      std::copy(vocab_->text_mask().begin(), vocab_->text_mask().end(), mask.begin());
      allow(mask, layout_->analysis_end);
      return;
    }
    case Phase::kChoose: {
      std::fill(mask.begin(), mask.end(), 0u);
      for (const TurnBranch& br : layout_->branches)
        if (br.header.size() > chosen_.size() &&
            std::equal(chosen_.begin(), chosen_.end(), br.header.begin()))
          allow(mask, br.header[chosen_.size()]);
      return;
    }
    case Phase::kFreeBody: {
      const int32_t end = layout_->branches[branch_].end_token;
      if (remaining <= 1) {
        only(mask, end);
        return;
      }
      std::copy(vocab_->text_mask().begin(), vocab_->text_mask().end(), mask.begin());
      allow(mask, end);
      return;
    }
    case Phase::kGrammarBody:
      body_->fill_mask(mask, remaining);
      return;
    case Phase::kDone:
      // Only reached when the end token does not stop the request (ignore_eos): it repeats.
      only(mask, layout_->branches[branch_].end_token);
      return;
  }
}

bool TurnConstraint::accept(int32_t token) {
  switch (phase_) {
    case Phase::kForced:
      if (token != forced_[forced_pos_]) return false;
      ++forced_pos_;
      after_forced();
      return true;
    case Phase::kAnalysis:
      if (token == layout_->analysis_end) {
        forced_ = layout_->analysis_reopen;
        after_forced_ = Phase::kChoose;
        after_forced();
        return true;
      }
      if (!allowed(vocab_->text_mask(), token)) return false;
      ++analysis_tokens_;
      return true;
    case Phase::kChoose: {
      chosen_.push_back(token);
      bool any = false;
      for (size_t b = 0; b < layout_->branches.size(); ++b) {
        const auto& h = layout_->branches[b].header;
        if (h.size() < chosen_.size() || !std::equal(chosen_.begin(), chosen_.end(), h.begin())) continue;
        any = true;
        if (h.size() == chosen_.size()) {
          enter_branch(b);
          return true;
        }
      }
      return any;
    }
    case Phase::kFreeBody:
      if (token == layout_->branches[branch_].end_token) {
        phase_ = Phase::kDone;
        return true;
      }
      return allowed(vocab_->text_mask(), token);
    case Phase::kGrammarBody:
      if (!body_->accept(token)) return false;
      if (body_->finished()) phase_ = Phase::kDone;
      return true;
    case Phase::kDone:
      return token == layout_->branches[branch_].end_token;
  }
  return false;
}

}  // namespace orchid::structured
