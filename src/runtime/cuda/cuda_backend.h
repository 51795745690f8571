// The CUDA backend: the Backend face over the ranks of a tensor/expert-parallel group (cuda_rank.h), one
// rank per GPU (rank r on GPU r, NCCL collectives) or, for tests of the parallel code, every rank on one GPU
// (share_device). The ranks are threads of this process: each step runs them side by side and returns rank
// 0's output. One rank (the default) runs on the calling thread with no collective at all.
//
// Why threads, not a process per GPU: one process keeps the engine, the scheduler and every rank's step in
// one address space (no IPC of the step's metadata, one CUDA context per GPU), starts in seconds, and fails
// as a unit; the cost is that a rank's crash takes the others down, which a step's failure would anyway.
// Groups across nodes use one process per node (--nnodes, the TCP rendezvous carries the NCCL id).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/parallel.h"
#include "runtime/backend.h"
#include "runtime/cuda/cuda_backend_options.h"

namespace orchid::runtime::cuda {

bool cuda_device_available();

class CudaRank;
class DeviceCommunicator;

class CudaBackend final : public Backend {
 public:
  CudaBackend(const std::string& model_arg, const CudaBackendOptions& opts);
  ~CudaBackend() override;

  std::string name() const override { return "cuda"; }
  const model::ModelConfig& model_config() const override { return config_; }
  KvCacheSpec kv_spec() const override { return spec_; }
  int32_t max_step_tokens() const override { return opts_.max_step_tokens; }
  int32_t max_step_seqs() const override { return opts_.max_step_seqs; }
  int32_t max_draft_tokens() const override { return opts_.max_draft_tokens; }
  std::vector<int32_t> decode_graph_batches() const override;
  std::vector<int32_t> prefill_warm_up_lengths() const override;
  int32_t max_proposals() const override;
  // The GPU sampler applies StepBatch::token_masks (structured outputs), waiting for them only when it runs.
  bool applies_token_masks() const override { return true; }
  // K/V handoff through host memory (page copies to and from the device).
  bool supports_kv_handoff() const override { return true; }
  std::string kv_layout() const override;
  KvPages read_kv(std::span<const int32_t> full_pages, std::span<const int32_t> sliding_pages,
                  int32_t first_sliding_page, int32_t num_tokens) override;
  void write_kv(const KvPages& kv, std::span<const int32_t> full_pages,
                std::span<const int32_t> sliding_pages) override;
  // In place over CUDA IPC (runtime/kv_share.h): every instance takes shared pages; one with
  // --kv-share-buffer also exports them (each rank's buffer holds a lease's range at the same offset).
  std::string kv_share_transport() const override { return "cuda_ipc"; }
  // Only to a receiver of the same split (rank r maps rank r's buffer); another one gets the bytes.
  std::optional<KvPages> share_kv(std::span<const int32_t> full_pages, std::span<const int32_t> sliding_pages,
                                  int32_t first_sliding_page, int32_t num_tokens,
                                  int32_t receiver_ranks) override;
  int32_t kv_ranks() const override { return int32_t(ranks_.size()); }
  bool release_kv_share(uint64_t lease) override { return leases_ && leases_->release(lease); }
  size_t kv_share_leases() const override { return leases_ ? leases_->leases() : 0; }
  void open_kv_share(const KvShare& share) override;
  StepOutput forward(const StepBatch& batch) override;
  // Steps are enqueued on every rank and read later (CudaRank::launch); rank 0 draws, and the next step's
  // tokens reach the other ranks on the device. (Ranks sharing one GPU synchronise at each collective on
  // the host, so there a launch returns when the step is done: correct, not overlapped.)
  void launch(const StepBatch& batch) override;
  StepOutput collect() override;
  bool launches_async() const override { return true; }
  // Masks after launch (structured outputs in the pipeline): rank 0 enqueues the step's sampling when they
  // come (CudaRank::supply_masks).
  void supply_masks(const StepBatch& batch) override;
  bool accepts_late_masks() const override { return true; }
  std::vector<float> run_layer(int64_t layer, const std::vector<float>& x, int64_t n,
                               std::vector<int32_t>* topk) override;

 private:
  // A share this instance can take in place: CUDA IPC, from ranks that split the KV heads evenly.
  void check_share_split(const KvShare& share) const;
  void validate(const StepBatch& b) const;
  // Bytes of one KV head's block in a page of each layer of a pool's kind, in layer order (kv_reshard.h).
  std::vector<size_t> head_block_bytes(bool sliding) const;
  // Runs fn on every rank (its own thread when there are several); rethrows the first rank's own error
  // after aborting the collectives the others may be waiting in.
  void on_ranks(const std::function<void(CudaRank&)>& fn);

  CudaBackendOptions opts_;
  model::ModelConfig config_;
  model::ShardPlan plan_;
  KvCacheSpec spec_;
  std::vector<std::unique_ptr<DeviceCommunicator>> comms_;
  std::vector<std::unique_ptr<CudaRank>> ranks_;
  std::unique_ptr<KvShareLeases> leases_;  // of the export buffers (opts_.kv_share_bytes)
};

}  // namespace orchid::runtime::cuda
