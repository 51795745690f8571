// Stop strings on streamed text that is not the engine's whole output: for Harmony chat, `stop` applies to
// the answer (the final channel), not to the reasoning or the message headers the model also generates, so
// the server matches it on the content deltas. Text that could be the start of a stop string is held back
// until it is known not to be one.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace orchid::server {

class StopStringMatcher {
 public:
  StopStringMatcher() = default;
  explicit StopStringMatcher(std::vector<std::string> stops);  // non-empty strings

  // Feeds text; returns what may be shown now. After a match, the text before it is returned, matched()
  // turns true and later calls return "".
  std::string push(std::string_view text);
  // The end of the stream: whatever was held back.
  std::string flush();
  bool matched() const { return matched_; }
  bool active() const { return !stops_.empty(); }

 private:
  std::vector<std::string> stops_;
  std::string pending_;  // not shown yet
  bool matched_ = false;
};

}  // namespace orchid::server
