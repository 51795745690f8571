// Which rows an EAGLE-3 draft head catches up on after a step, and which it proposes after: the bookkeeping
// every backend's head shares (runtime/cpu/cpu_eagle3.h, runtime/cuda/cuda_eagle3.h do the math).
//
// A head row pairs a token's combined target state g = fc(aux) with the token that follows it, so a row is
// ready once its successor is known: the step's accepted tokens (drafts past the first rejection are not the
// sequence's), the last of them paired with the token just sampled. A prefill chunk's last row waits for the
// next chunk's first token: its g is kept by sequence id and taken by the step that continues at pos + 1
// (dropped if the sequence comes back elsewhere, or not at all).
#pragma once

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

#include "runtime/backend.h"

namespace orchid::runtime {

// One sequence's rows in a step, at consecutive positions first_pos..: the pending row first when
// `pending_g` holds one, then step token rows step_row_begin.. (step_rows of them); next[i] follows row i.
struct Eagle3SeqRows {
  size_t seq = 0;  // index in the batch
  int32_t first_pos = 0;
  std::optional<std::vector<float>> pending_g;
  int32_t step_row_begin = 0, step_rows = 0;
  std::vector<int32_t> next;
  int32_t keep_row = -1;  // a step token row whose g waits for the next chunk (the sequence samples nothing)
  int32_t propose = 0;    // drafts asked for after the last row (sampled sequences with rows)
  int32_t accepted = 0;   // drafts of the step the sequence kept (its draws so far: 1 + accepted)
  int32_t rows() const { return int32_t(next.size()); }
  int32_t last_pos() const { return first_pos + rows() - 1; }
};

class Eagle3PendingRows {
 public:
  // Every sequence of `b` with new tokens, in batch order (after sampling: `out` has the accepted runs),
  // taking the pending rows the step continues. Sampled sequences without rows are listed too (propose 0).
  std::vector<Eagle3SeqRows> plan(const StepBatch& b, const StepOutput& out);
  // Keeps the g of a sequence's kept row (Eagle3SeqRows::keep_row) for the step that continues it.
  void keep(const StepBatch& b, const Eagle3SeqRows& rows, std::vector<float> g);

 private:
  struct Row {
    int32_t pos = 0;
    std::vector<float> g;
    int64_t step = 0;
  };
  std::unordered_map<int64_t, Row> rows_;
  int64_t steps_ = 0;
};

}  // namespace orchid::runtime
