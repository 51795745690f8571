#include "runtime/eagle3_rows.h"

#include "core/error.h"

namespace orchid::runtime {

std::vector<Eagle3SeqRows> Eagle3PendingRows::plan(const StepBatch& b, const StepOutput& out) {
  ++steps_;
  // Rows of sequences that never came back (aborted between chunks): dropped once they are old.
  if (rows_.size() > 1024) std::erase_if(rows_, [&](const auto& kv) { return kv.second.step + 64 < steps_; });
  std::vector<Eagle3SeqRows> plan;
  size_t sample_at = 0, accepted_at = 0;
  for (size_t i = 0; i < b.seqs.size(); ++i) {
    const StepSequence& s = b.seqs[i];
    if (s.num_tokens == 0) {
      if (s.sample) {
        Eagle3SeqRows r;
        r.seq = i;
        r.first_pos = s.start_pos;
        plan.push_back(std::move(r));
      }
      continue;
    }
    // The step's tokens that are now the sequence's, and the token sampled after them.
    int32_t accepted = 0, sampled = -1;
    if (s.sample) {
      accepted = out.num_accepted.empty() ? 0 : out.num_accepted.at(accepted_at++);
      sample_at += size_t(accepted) + 1;
      ORCHID_CHECK(sample_at <= out.samples.size(), "EAGLE-3 head: fewer samples than accepted runs");
      sampled = out.samples[sample_at - 1].token;
    }
    const int32_t valid = s.sample ? s.num_tokens - s.num_draft + accepted : s.num_tokens;
    const int32_t own = s.sample ? valid : valid - 1;
    Eagle3SeqRows r;
    r.seq = i;
    r.first_pos = s.start_pos;
    r.accepted = accepted;
    if (auto it = rows_.find(s.seq_id); it != rows_.end()) {
      if (it->second.pos == s.start_pos - 1) {  // the previous chunk's last row, whose successor is here
        r.first_pos = it->second.pos;
        r.pending_g = std::move(it->second.g);
        r.next.push_back(b.tokens[size_t(s.token_begin)]);
      }
      rows_.erase(it);
    }
    r.step_row_begin = s.token_begin;
    r.step_rows = own;
    for (int32_t k = 0; k < own; ++k)
      r.next.push_back(k + 1 < valid ? b.tokens[size_t(s.token_begin + k + 1)] : sampled);
    if (!s.sample) r.keep_row = s.token_begin + valid - 1;
    if (s.sample && !r.next.empty()) r.propose = s.num_propose;
    plan.push_back(std::move(r));
  }
  return plan;
}

void Eagle3PendingRows::keep(const StepBatch& b, const Eagle3SeqRows& rows, std::vector<float> g) {
  const StepSequence& s = b.seqs.at(rows.seq);
  ORCHID_CHECK(rows.keep_row >= 0, "EAGLE-3 head: no row to keep for sequence {}", s.seq_id);
  rows_[s.seq_id] = {s.start_pos + s.num_tokens - 1, std::move(g), steps_};
}

}  // namespace orchid::runtime
