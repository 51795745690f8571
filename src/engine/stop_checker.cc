#include "engine/stop_checker.h"

#include <algorithm>
#include <utility>

#include "core/error.h"

namespace orchid::engine {

StopChecker::StopChecker(StopConfig config, std::unique_ptr<TextDecoder> decoder)
    : config_(std::move(config)), decoder_(std::move(decoder)) {
  ORCHID_CHECK(config_.max_tokens > 0);
  ORCHID_CHECK(config_.stop_strings.empty() || decoder_ != nullptr, "stop strings need a text decoder");
  for (const auto& s : config_.stop_strings) {
    ORCHID_CHECK(!s.empty());
    max_stop_len_ = std::max(max_stop_len_, s.size());
  }
}

bool StopChecker::is_stop_id(int32_t id) const {
  return std::find(config_.stop_ids.begin(), config_.stop_ids.end(), id) != config_.stop_ids.end();
}

std::string StopChecker::take_text(size_t end) {
  ORCHID_CHECK(end >= emitted_ && end <= text_.size());
  std::string out = text_.substr(emitted_, end - emitted_);
  emitted_ = end;
  // Only the last max_stop_len-1 shown bytes can still take part in a match.
  const size_t keep = max_stop_len_ > 0 ? max_stop_len_ - 1 : 0;
  if (emitted_ > keep + 4096) {
    const size_t drop = emitted_ - keep;
    text_.erase(0, drop);
    emitted_ -= drop;
  }
  return out;
}

size_t StopChecker::held_back() const {
  size_t hold = 0;
  for (const auto& s : config_.stop_strings) {
    // The longest suffix of the unshown text that is a proper prefix of s.
    const size_t limit = std::min(s.size() - 1, text_.size() - emitted_);
    for (size_t len = limit; len > hold; --len) {
      if (text_.compare(text_.size() - len, len, s, 0, len) == 0) {
        hold = len;
        break;
      }
    }
  }
  return hold;
}

std::string StopChecker::release_text() {
  std::string out = take_text(text_.size());
  if (decoder_) out += decoder_->flush();
  return out;
}

StopOutcome StopChecker::on_token(int32_t id, int32_t num_outputs, bool context_full) {
  StopOutcome out;
  const int32_t index = num_outputs - 1;
  // The stop token's own text is not shown (it is usually a special token), as in vLLM.
  if (index >= config_.min_tokens && is_stop_id(id)) {
    out.finish = FinishReason::kStop;
    out.stop_token = id;
    out.text = release_text();
    return out;
  }
  const size_t before = text_.size();
  if (decoder_) text_ += decoder_->append(id);

  if (!config_.stop_strings.empty() && num_outputs >= config_.min_tokens && text_.size() > before) {
    // A match must end in the new text; it may start up to len-1 bytes earlier.
    size_t best_pos = std::string::npos;
    const std::string* best = nullptr;
    for (const auto& s : config_.stop_strings) {
      const size_t from = before >= s.size() - 1 ? before - (s.size() - 1) : 0;
      const size_t pos = text_.find(s, std::max(from, emitted_));
      if (pos != std::string::npos && pos < best_pos) {
        best_pos = pos;
        best = &s;
      }
    }
    if (best) {
      out.finish = FinishReason::kStop;
      out.stop_string = *best;
      out.text = take_text(best_pos + (config_.include_stop_str_in_output ? best->size() : 0));
      return out;
    }
  }

  if (num_outputs >= config_.max_tokens || context_full) {
    out.finish = FinishReason::kLength;
    out.text = release_text();
    return out;
  }
  out.text = take_text(text_.size() - held_back());
  return out;
}

}  // namespace orchid::engine
