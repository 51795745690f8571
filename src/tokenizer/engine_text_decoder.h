// The engine's TextDecoder over a tokenizer's incremental detokenizer: gives engine events their text and
// lets requests stop on strings. The engine sits below the tokenizer and never sees text, so upper layers
// hand it one of these per request.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "engine/text_decoder.h"
#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/tokenizer.h"

namespace orchid::tokenizer {

class EngineTextDecoder final : public engine::TextDecoder {
 public:
  explicit EngineTextDecoder(std::shared_ptr<const Tokenizer> tokenizer)
      : tokenizer_(std::move(tokenizer)), detokenizer_(*tokenizer_) {}

  // Never throws: it runs on the engine's thread inside a step. An id the tokenizer does not know (a model
  // whose vocabulary is larger than its tokenizer's) renders as U+FFFD.
  std::string append(int32_t id) override { return detokenizer_.push_lossy(id); }
  std::string flush() override { return detokenizer_.flush(); }

 private:
  std::shared_ptr<const Tokenizer> tokenizer_;  // outlives detokenizer_, which refers to it
  IncrementalDetokenizer detokenizer_;
};

}  // namespace orchid::tokenizer
