#include "server/stop_strings.h"

#include <algorithm>

namespace orchid::server {

StopStringMatcher::StopStringMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {
  stops_.erase(std::remove(stops_.begin(), stops_.end(), std::string()), stops_.end());
}

std::string StopStringMatcher::push(std::string_view text) {
  if (matched_) return {};
  if (stops_.empty()) return std::string(text);
  pending_.append(text);
  size_t best = std::string::npos;
  for (const auto& s : stops_) best = std::min(best, pending_.find(s));
  if (best != std::string::npos) {
    matched_ = true;
    std::string out = pending_.substr(0, best);
    pending_.clear();
    return out;
  }
  // Hold back the longest tail that is a proper prefix of a stop string. It starts where a stop string
  // starts, so the cut never splits a UTF-8 character.
  size_t hold = 0;
  for (const auto& s : stops_) {
    for (size_t len = std::min(s.size() - 1, pending_.size()); len > hold; --len) {
      if (pending_.compare(pending_.size() - len, len, s, 0, len) == 0) {
        hold = len;
        break;
      }
    }
  }
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string StopStringMatcher::flush() {
  std::string out;
  out.swap(pending_);
  return matched_ ? std::string() : out;
}

}  // namespace orchid::server
