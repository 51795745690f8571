// Driving data-parallel attention replicas whose steps must run together (Backend::lockstep_replicas() > 1:
// their ranks share the MoE's collectives) from code that runs steps itself: every replica's forward() at
// the same time, each on a thread of its own, an empty batch for those with nothing to run. Engines step
// replicas through engine::StepRound instead.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "runtime/backend.h"

namespace orchid::runtime {

// Runs replicas[i]->forward(*batches[i]) together (replica 0 on the calling thread); a null batch is an
// empty step. Lockstep replicas must all be there; independent ones simply run at the same time. When every
// call has returned, rethrows the first orchid::Error among the failures (else the first failure).
std::vector<StepOutput> forward_together(std::span<const std::shared_ptr<Backend>> replicas,
                                         std::span<const StepBatch* const> batches);

// The Backend face of a set of replicas for code that runs one batch at a time (orchid forward, layer,
// bench prefill; SequenceRunner): replica 0 runs the batch while the others, when they step in lockstep with
// it, run empty steps. The rest (KV spec, limits, K/V handoff) is replica 0's.
class LeadReplica final : public Backend {
 public:
  explicit LeadReplica(std::vector<std::shared_ptr<Backend>> replicas);
  std::string name() const override { return lead().name(); }
  const model::ModelConfig& model_config() const override { return lead().model_config(); }
  KvCacheSpec kv_spec() const override { return lead().kv_spec(); }
  int32_t max_step_tokens() const override { return lead().max_step_tokens(); }
  int32_t max_step_seqs() const override { return lead().max_step_seqs(); }
  int32_t max_draft_tokens() const override { return lead().max_draft_tokens(); }
  int32_t max_proposals() const override { return lead().max_proposals(); }
  bool applies_token_masks() const override { return lead().applies_token_masks(); }
  StepOutput forward(const StepBatch& batch) override;
  bool supports_kv_handoff() const override { return lead().supports_kv_handoff(); }
  std::string kv_layout() const override { return lead().kv_layout(); }
  KvPages read_kv(std::span<const int32_t> full_pages, std::span<const int32_t> sliding_pages,
                  int32_t first_sliding_page, int32_t num_tokens) override;
  void write_kv(const KvPages& kv, std::span<const int32_t> full_pages,
                std::span<const int32_t> sliding_pages) override;
  std::vector<float> run_layer(int64_t layer, const std::vector<float>& x, int64_t n,
                               std::vector<int32_t>* topk) override;
  const std::vector<std::shared_ptr<Backend>>& replicas() const { return replicas_; }

 private:
  Backend& lead() const { return *replicas_[0]; }
  bool together() const { return replicas_.size() > 1 && replicas_[0]->lockstep_replicas() > 1; }
  std::vector<std::shared_ptr<Backend>> replicas_;
};

}  // namespace orchid::runtime
