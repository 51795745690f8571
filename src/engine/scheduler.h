// The scheduler: which tokens of which sequences run in the next step, under a token budget
// (max_num_batched_tokens) and a cap on running sequences (max_num_seqs). Policy (docs/design.md, "Engine"):
// decodes of running sequences first, then their unfinished prefill chunks, then waiting requests in
// precedence order (priority, then arrival) with chunked prefill; when pages run out the lowest-precedence
// running sequence is preempted (its pages dropped, recomputed later from its tokens). With a proposer
// (speculative decoding) a decode carries drafts too, from what the budget leaves after one token for each.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <unordered_map>
#include <vector>

#include "engine/batch_builder.h"
#include "engine/block_manager.h"
#include "engine/proposer.h"
#include "engine/sequence.h"
#include "runtime/backend.h"

namespace orchid::engine {

struct SchedulerConfig {
  int32_t max_num_seqs = 256;
  int32_t max_num_batched_tokens = 8192;
  int32_t max_chunk_tokens = 1 << 30;  // per sequence and step (the sliding pool's limit for one sequence)
  runtime::LogitsMode logits = runtime::LogitsMode::kNone;
  // Speculative decoding: drafts per decoding sequence and step, at most, from `proposer` (not owned).
  int32_t num_speculative_tokens = 0;
  Proposer* proposer = nullptr;
  int32_t max_model_len = 1 << 30;  // no draft reaches past it
  // The backend takes a step's token masks after launching it (Backend::accepts_late_masks): structured
  // outputs may then be planned ahead of a launched step.
  bool late_masks = false;
};

struct SchedulerCounters {
  int64_t preemptions = 0;
  int64_t prefix_query_tokens = 0;  // prompt tokens looked up at first admission
  int64_t prefix_hit_tokens = 0;    // of which served from the cache
  int64_t imported_tokens = 0;      // prompt tokens whose K/V were handed over (disaggregation)
  // Speculative decoding: sequence-steps that carried drafts, the drafts, and those the target accepted.
  int64_t spec_drafts = 0, spec_draft_tokens = 0, spec_accepted_tokens = 0;
};

class Scheduler {
 public:
  Scheduler(SchedulerConfig config, BlockManager* blocks);

  void add(std::unique_ptr<Sequence> seq);
  Sequence* find(int64_t id) const;

  // Plans the next step and builds its batch (batch()). Returns false when there is nothing to run.
  // ahead (asynchronous scheduling): a step is launched and not read yet (Sequence::ahead): the plan
  // follows it, its sequences' draws entering the batch as StepBatch::from_previous. Such a plan never
  // preempts and does not admit a request that needs what the launched step decides (a structured output;
  // K/V to export); it is not made (false) when a running sequence needs what the launched step draws on
  // the host (a structured output's mask), when a decode would need a preemption, or when such a request
  // heads the queue (a penalty's history takes the draw like the tokens do,
  // StepBatch::history_from_previous): the engine then reads the launched step first and plans as usual. A
  // sequence whose draw in the launched step ends it by max_tokens or the context is left out; one that ends
  // by what it draws is found when the engine reads it, and the engine drops what it drew after.
  bool schedule(std::vector<ScheduledSeq>& plan, bool ahead = false);
  const runtime::StepBatch& batch() const { return builder_.batch(); }
  runtime::StepBatch& batch() { return builder_.batch(); }
  // The step ran: the planned tokens up to the drafts, and the first `accepted` drafts, are in the cache now;
  // the caller has appended the step's sampled tokens to the sequence. Pages of rejected drafts are freed.
  void complete(const ScheduledSeq& entry, int32_t accepted = 0);
  // Ends a sequence: drops its pages and forgets it. The caller has sent its final event.
  void finish(Sequence* seq);

  size_t num_waiting() const { return waiting_.size(); }
  const std::deque<Sequence*>& waiting() const { return waiting_; }
  size_t num_running() const { return running_.size(); }
  size_t num_sequences() const { return seqs_.size(); }
  const SchedulerCounters& counters() const { return counters_; }
  std::vector<Sequence*> sequences() const;

  // Scheduler and block-manager invariants; throws InternalError on the first violation. A sequence of a
  // launched step holds pages for its tokens already (Sequence::ahead).
  void check_invariants() const;

 private:
  // ahead: never preempts (false when the pages are not there).
  bool reserve(Sequence* seq, int32_t n, int32_t num_draft, std::vector<ScheduledSeq>& plan, int32_t& budget,
               bool ahead);
  bool ends_at_launched_step(const Sequence* seq) const;
  // Whether a plan ahead of a launched step can be made (schedule(plan, true)).
  bool plannable_ahead() const;
  // Fills the drafts of this step's decoding sequences (all with s->draft cleared).
  void propose_drafts(const std::vector<Sequence*>& decodes, int32_t budget);
  void preempt(Sequence* seq, std::vector<ScheduledSeq>& plan, int32_t& budget);
  void insert_waiting(Sequence* seq);
  void insert_running(Sequence* seq);

  SchedulerConfig config_;
  BlockManager* blocks_;
  BatchBuilder builder_;
  std::unordered_map<int64_t, std::unique_ptr<Sequence>> seqs_;
  std::deque<Sequence*> waiting_;   // precedence order
  std::vector<Sequence*> running_;  // precedence order
  std::vector<Sequence*> decodes_;  // this step's decoding sequences (kept to reuse its memory)
  bool preempted_this_step_ = false;
  int32_t finished_unreaped_ = 0;  // finished sequences still in the queues
  SchedulerCounters counters_;
};

}  // namespace orchid::engine
