// When a request stops, and which text it may show: stop ids and EOS (not before min_tokens), stop strings
// matched on the decoded text (a match may span several tokens), max_tokens and the context limit.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/request.h"
#include "engine/text_decoder.h"

namespace orchid::engine {

struct StopConfig {
  std::vector<int32_t> stop_ids;  // the request's stop ids plus the model's EOS ids unless ignore_eos
  std::vector<std::string> stop_strings;
  bool include_stop_str_in_output = false;
  int32_t min_tokens = 0;
  int32_t max_tokens = 0;  // resolved: > 0
};

struct StopOutcome {
  FinishReason finish = FinishReason::kNone;  // kStop or kLength when the request ends with this token
  int32_t stop_token = -1;
  std::string stop_string;
  std::string text;  // text that may be shown now
};

class StopChecker {
 public:
  StopChecker(StopConfig config, std::unique_ptr<TextDecoder> decoder);

  // The request's next output token; `num_outputs` counts it, `context_full` says the sequence reached
  // the model's context limit.
  StopOutcome on_token(int32_t id, int32_t num_outputs, bool context_full);
  // The request ends for another reason (abort, error): the text held back so far.
  std::string release_text();

  // Stop ids and EOS may not be drawn for output index `index` (min_tokens).
  bool bans_stop_ids(int32_t index) const { return index < config_.min_tokens && !config_.stop_ids.empty(); }
  const StopConfig& config() const { return config_; }

 private:
  bool is_stop_id(int32_t id) const;
  std::string take_text(size_t end);  // text_[emitted_, end) and marks it emitted
  size_t held_back() const;           // length of the tail of text_ that could start a stop string

  StopConfig config_;
  std::unique_ptr<TextDecoder> decoder_;
  size_t max_stop_len_ = 0;
  std::string text_;    // decoded output, minus a prefix that can no longer matter
  size_t emitted_ = 0;  // bytes of text_ already shown
};

}  // namespace orchid::engine
