// Builds the StepBatch of each step. The page tables are kept across steps rather than rebuilt: every running
// sequence owns a region of StepBatch::full_page_table / sliding_page_table (with room to grow) for as long
// as it runs, and a step writes only what changed (a new page, a page that left the window). With 512
// sequences of 8k tokens a rebuild would copy 2 MB per step; this writes a few hundred bytes. Regions of
// sequences that stopped running are reclaimed by compaction once they make up half of the tables.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/sequence.h"
#include "runtime/backend.h"

namespace orchid::engine {

struct ScheduledSeq {
  Sequence* seq = nullptr;
  int32_t num_tokens = 0;  // the drafts included
  bool sample = false;
  int32_t num_draft = 0;         // the last num_draft tokens are seq->draft
  bool import_kv = false;        // the engine writes seq->kv_import into its pages before the step
  bool first_admission = false;  // the request leaves the queue for the first time in this step
};

class BatchBuilder {
 public:
  BatchBuilder(bool has_sliding, runtime::LogitsMode logits);

  // The batch for `plan`. `holders` are all sequences that may own a region (the running ones). A token that
  // a launched step draws (Sequence::ahead_sample) enters as StepBatch::from_previous.
  const runtime::StepBatch& build(const std::vector<ScheduledSeq>& plan,
                                  const std::vector<Sequence*>& holders);
  // The sequence stopped running (finished, aborted, preempted): its region is free.
  void drop(Sequence* seq);
  // The sequence's tables lost pages at their end (rejected drafts): the entries there are stale, and the
  // pages that take their places later must be written again.
  void truncated(Sequence* seq);
  const runtime::StepBatch& batch() const { return batch_; }
  // The engine adds the step's token masks (structured outputs) to the batch it built.
  runtime::StepBatch& batch() { return batch_; }

 private:
  void start(const std::vector<Sequence*>& holders, size_t num_seqs);
  // Fills what every entry has: its tables, positions (past what a launched step computes: Sequence::ahead),
  // sampling parameters and banned tokens.
  runtime::StepSequence sequence(const ScheduledSeq& e);
  void sync_tables(Sequence* seq);
  void place(Sequence* seq);  // a fresh region at the end of the tables
  void compact(const std::vector<Sequence*>& holders);

  bool has_sliding_;
  runtime::StepBatch batch_;
  int64_t garbage_ = 0;  // table entries owned by no running sequence
};

}  // namespace orchid::engine
