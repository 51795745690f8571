// A stand-in model for engine tests and benchmarks. It keeps a paged "K/V" of its own: the value written at
// position p is a hash of every token up to p, read back through the page tables of the batch, and the
// logits of a position are a hash of everything readable from its context (all full-layer slots, the
// sliding window). So its outputs depend on exactly the context a real model would see through the pages:
// a wrong page, a stale cached page or a lost token changes them. It also checks every batch it receives
// (layout, page ownership, positions, sample indices) and throws InternalError on the first violation.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <unordered_map>
#include <vector>

#include "model/config.h"
#include "runtime/backend.h"

namespace orchid::engine::testing {

struct FakeBackendOptions {
  int32_t vocab_size = 64;
  runtime::KvCacheSpec kv{
      .page_size = 4, .num_full_pages = 512, .num_sliding_pages = 128, .sliding_window = 8};
  std::vector<int64_t> eos_token_ids{0};
  int64_t max_position = 4096;
  uint64_t salt = 0;                    // another "model"
  float logit_scale = 6.0f;             // logits are uniform-ish in [0, scale)
  float eos_bonus = 0.0f;               // added to the EOS logits
  bool simulate = true;                 // false: no K/V, no checks, instant answers (benchmarks)
  std::optional<int32_t> reject_token;  // a batch holding this id is refused with orchid::Error
  // simulate=false: how long a step takes (a stand-in for the model's forward, overlapping the engine's
  // token-mask work as a real backend's would).
  std::chrono::microseconds step_time{0};
  int32_t max_draft_tokens = 16;   // speculative decoding: drafts verified per sequence (simulate only)
  bool check_sample_index = true;  // each sequence's sample indices count up (not so for a draft model)
  // launch() only queues the batch and collect() computes it, in launch order, as a device runs a stream
  // behind the host: the engine's bookkeeping between the two (pages freed and handed out again) happens
  // before the step it launched has read or written anything.
  bool deferred = false;
};

class FakeBackend : public runtime::Backend {
 public:
  explicit FakeBackend(FakeBackendOptions options = {});

  std::string name() const override { return "fake"; }
  bool applies_token_masks() const override { return true; }
  int32_t max_draft_tokens() const override { return options_.simulate ? options_.max_draft_tokens : 0; }
  const model::ModelConfig& model_config() const override { return config_; }
  runtime::KvCacheSpec kv_spec() const override { return options_.kv; }
  runtime::StepOutput forward(const runtime::StepBatch& batch) override;
  void launch(const runtime::StepBatch& batch) override;
  runtime::StepOutput collect() override;
  void supply_masks(const runtime::StepBatch& batch) override;
  bool launches_async() const override { return options_.deferred; }

  // Largest batch seen, for limit checks.
  int32_t max_batch_tokens() const { return max_batch_tokens_; }
  int32_t max_batch_seqs() const { return max_batch_seqs_; }
  int64_t num_steps() const { return num_steps_; }
  // Steps launched with tokens of the step before them (StepBatch::from_previous).
  int64_t num_continued_steps() const { return num_continued_; }

 private:
  struct Slot {
    uint64_t value = 0;
    int32_t pos = -1;
  };
  void validate(const runtime::StepBatch& batch);
  Slot& slot(std::vector<Slot>& pool, const std::vector<int32_t>& table, int32_t begin, int32_t pos);
  uint64_t read(std::vector<Slot>& pool, const std::vector<int32_t>& table, int32_t begin, int32_t pos);
  void logits_row(const runtime::StepBatch& batch, const runtime::StepSequence& s, int32_t pos, float* out);

  FakeBackendOptions options_;
  model::ModelConfig config_;
  std::vector<Slot> full_kv_, sliding_kv_;  // [page * page_size + offset]
  std::unordered_map<int64_t, int32_t> next_sample_index_;
  int32_t max_batch_tokens_ = 0, max_batch_seqs_ = 0;
  int64_t num_steps_ = 0, num_continued_ = 0;
  std::deque<runtime::StepBatch> deferred_;  // launched, not computed (options_.deferred)
  std::vector<int32_t> last_tokens_;         // the tokens the last computed deferred step drew
};

}  // namespace orchid::engine::testing
