// The fp32 CPU backend: the whole gpt-oss forward pass written plainly, with a paged KV cache of the same
// shape the engine drives on the GPU. It is the oracle for the CUDA kernels and the backend of every CI test.
//
// Parallel: with --tp/--ep the model is split as model/parallel.h says over ranks that are threads of this
// process, exchanging through in-process communicators. The forward is written once over a rank's shard
// (its heads, KV heads, experts and vocabulary rows) with explicit collective points: all-reduce after the O
// projection (TP group) and after the MoE (EP group), all-gather of the vocab-parallel logits. One rank is
// the same code with no-op collectives.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "model/loader.h"
#include "model/parallel.h"
#include "model/rope.h"
#include "runtime/backend.h"
#include "runtime/communicator.h"
#include "runtime/cpu/cpu_eagle3.h"
#include "runtime/cpu/cpu_weights.h"
#include "runtime/eagle3_rows.h"

namespace orchid::runtime::cpu {

struct CpuBackendOptions {
  int32_t page_size = 16;
  int32_t num_full_pages = 0;     // 0: enough for `max_tokens` tokens
  int32_t num_sliding_pages = 0;  // 0: enough for `max_tokens` tokens
  int64_t max_tokens = 8192;      // only used to size the default pools
  model::ParallelConfig parallel;
  // Ranks in separate processes, one each (runtime/tcp_communicator.h): the group of all of them. Rank 0's
  // backend is the engine's; the others run serve_worker(). Null: every rank is a thread of this process.
  std::shared_ptr<Communicator> process_group;
  // An EAGLE-3 draft head (model/eagle3.h: a directory or `synthetic[@seed]`); empty: none.
  std::string eagle3_head;
};

class CpuBackend final : public Backend {
 public:
  CpuBackend(model::LoadedModel model, const CpuBackendOptions& opts);
  ~CpuBackend() override;
  static std::unique_ptr<CpuBackend> create(const std::string& model_arg, const CpuBackendOptions& opts = {});

  std::string name() const override { return "cpu"; }
  bool applies_token_masks() const override { return true; }
  int32_t max_draft_tokens() const override { return 64; }
  int32_t max_proposals() const override { return head_ ? 16 : 0; }
  const model::ModelConfig& model_config() const override { return model_.config; }
  KvCacheSpec kv_spec() const override { return spec_; }
  StepOutput forward(const StepBatch& batch) override;
  std::vector<float> run_layer(int64_t layer, const std::vector<float>& x, int64_t n,
                               std::vector<int32_t>* topk) override;
  // K/V handoff within one process's ranks (not across a --nnodes process group).
  bool supports_kv_handoff() const override { return !process_group_; }
  std::string kv_layout() const override;
  KvPages read_kv(std::span<const int32_t> full_pages, std::span<const int32_t> sliding_pages,
                  int32_t first_sliding_page, int32_t num_tokens) override;
  void write_kv(const KvPages& kv, std::span<const int32_t> full_pages,
                std::span<const int32_t> sliding_pages) override;
  const model::ShardPlan& plan() const { return plan_; }
  // Ranks > 0 of a process group: run every step rank 0 sends until rank 0's backend closes.
  void serve_worker();

 private:
  struct Rank;
  void validate(const StepBatch& b) const;
  // Each new token's position, and the token rows whose logits the step needs.
  static void step_layout(const StepBatch& b, std::vector<int32_t>& positions, std::vector<int64_t>& rows);
  // Runs fn on every rank (rank 0 on this thread, the others on their own), rethrowing the first failure;
  // a failing rank aborts the collectives so the others return too.
  void on_ranks(const std::function<void(Rank&)>& fn);
  // The draft head after a step's sampling (`out`): catches up on every sequence's tokens whose successor
  // is now known (K/V of the head at their positions) and proposes what sequences asked for.
  void run_head(const StepBatch& b, const std::vector<float>& aux, StepOutput& out);

  model::LoadedModel model_;
  CpuWeights w_;
  model::RopeTables rope_;
  KvCacheSpec spec_;
  model::ShardPlan plan_;
  std::shared_ptr<Communicator> process_group_;
  SoloCommunicator solo_;
  std::vector<std::unique_ptr<LocalCommunicator>> comms_;  // each rank's TP and EP communicators
  std::vector<std::unique_ptr<Rank>> ranks_;

  std::unique_ptr<CpuEagle3Head> head_;
  Eagle3PendingRows pending_rows_;  // the head's rows waiting for the next chunk (eagle3_rows.h)
};

}  // namespace orchid::runtime::cpu
