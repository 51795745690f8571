// Drives a Backend for one sequence with a trivial page assignment (page k of the sequence = page k of each
// pool): enough for `orchid forward`, simple generation and tests; the engine does the real scheduling.
#pragma once

#include <vector>

#include "runtime/backend.h"

namespace orchid::runtime {

class SequenceRunner {
 public:
  SequenceRunner(Backend& backend, SamplingParams params = {});

  // Feeds `ids` (in chunks of at most `chunk` tokens; 0 = one chunk). Returns the last chunk's output; with
  // `all_logits`, the logits of every fed token are appended to *logits ([n, vocab] row-major).
  StepOutput feed(const std::vector<int32_t>& ids, bool sample, bool all_logits = false, int32_t chunk = 0,
                  std::vector<float>* logits = nullptr);
  int32_t length() const { return int32_t(history_.size()); }
  const std::vector<int32_t>& history() const { return history_; }
  int32_t generated() const { return generated_; }

 private:
  Backend& backend_;
  SamplingParams params_;
  std::vector<int32_t> history_;
  int32_t prompt_len_ = -1;
  int32_t generated_ = 0;
};

}  // namespace orchid::runtime
