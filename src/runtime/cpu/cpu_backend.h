// The fp32 CPU backend: the whole gpt-oss forward pass written plainly, with a paged KV cache of the same
// shape the engine drives on the GPU. It is the oracle for the CUDA kernels and the backend of every CI test.
//
// Parallel: with --tp/--ep the model is split as model/parallel.h says over ranks that are threads of this
// process, exchanging through in-process communicators. The forward is written once over a rank's shard
// (its heads, KV heads, experts and vocabulary rows) with explicit collective points: all-reduce after the O
// projection (TP group) and after the MoE (EP group), all-gather of the vocab-parallel logits. One rank is
// the same code with no-op collectives.
//
// Data parallel (--dp D): D attention replicas, each a CpuBackend of its own (its TP ranks, their KV pools,
// an engine of its own), over one copy of the weights (CpuBackend::replicas). Where an EP group holds ranks
// of several replicas (--ep not dividing --tp) the MoE block is shared: a rank all-gathers the routed inputs
// of its EP group's tokens (every replica's, variable counts), runs its experts on all of them, and a
// reduce-scatter gives each rank the combine of its own replica's tokens. Those replicas' forward() calls
// must then run together (lockstep_replicas()), an empty StepBatch where a replica has nothing to do.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
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
#include "runtime/kv_cache_dtype.h"
#include "runtime/kv_share.h"
#include "runtime/shared_memory.h"

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
  // --kv-cache-dtype. The pools stay fp32: kBf16 keeps K/V as computed; kFp8E4M3 stores every element
  // rounded through e4m3 as the CUDA backend stores it (Rank::store_kv), so this backend's outputs are the
  // GPU's reference. Not rounded either way: layer 0 when it is a sliding layer (the GPU's precise layer
  // keeps fp32 pages; under --bf16-routing the GPU has none and rounds layer 0 too, which this does not
  // follow) and the draft head's K/V (the GPU head keeps bf16 pages).
  KvCacheDtype kv_cache_dtype = KvCacheDtype::kBf16;
  // K/V handed over in place (runtime/kv_share.h; --kv-share-buffer on a prefill instance): the export
  // object's size (0: none, pages go as bytes) and how long a lease holds its range.
  uint64_t kv_share_bytes = 0;
  int64_t kv_share_timeout_ms = 60000;
};

class CpuBackend final : public Backend {
 public:
  // One attention replica: opts.parallel.dp must be 1 (replicas() makes several).
  CpuBackend(model::LoadedModel model, const CpuBackendOptions& opts);
  ~CpuBackend() override;
  static std::unique_ptr<CpuBackend> create(const std::string& model_arg, const CpuBackendOptions& opts = {});
  // The opts.parallel.dp attention replicas, replica i holding ranks [i * TP, (i + 1) * TP), sharing the
  // weights, the plan and (where the EP groups span replicas) the MoE's collectives.
  static std::vector<std::shared_ptr<CpuBackend>> replicas(model::LoadedModel model,
                                                           const CpuBackendOptions& opts);
  static std::vector<std::shared_ptr<CpuBackend>> create_replicas(const std::string& model_arg,
                                                                  const CpuBackendOptions& opts);

  std::string name() const override { return "cpu"; }
  bool applies_token_masks() const override { return true; }
  int32_t max_draft_tokens() const override { return 64; }
  int32_t max_proposals() const override { return head_ ? 16 : 0; }
  const model::ModelConfig& model_config() const override;
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
  // In place through POSIX shared memory (runtime/kv_share.h): an instance with opts.kv_share_bytes exports
  // (the object is made at the first export, "/orchid-kv-<pid>-<n>"); every one imports.
  std::string kv_share_transport() const override;
  // Any receiver's split: its write_kv regroups the heads from the mapping.
  std::optional<KvPages> share_kv(std::span<const int32_t> full_pages, std::span<const int32_t> sliding_pages,
                                  int32_t first_sliding_page, int32_t num_tokens,
                                  int32_t receiver_ranks) override;
  int32_t kv_ranks() const override { return int32_t(ranks_.size()); }
  bool release_kv_share(uint64_t lease) override;
  size_t kv_share_leases() const override;
  void open_kv_share(const KvShare& share) override;
  int32_t lockstep_replicas() const override { return lockstep_; }
  int replica() const { return replica_; }
  // The whole group's plan (every replica's ranks).
  const model::ShardPlan& plan() const;
  // Ranks > 0 of a process group: run every step rank 0 sends until rank 0's backend closes.
  void serve_worker();

 private:
  struct Rank;
  struct Group;  // what the replicas share: weights, plan, communicators
  CpuBackend(std::shared_ptr<Group> group, int replica, const CpuBackendOptions& opts);
  static std::shared_ptr<Group> one_replica_group(model::LoadedModel model, const CpuBackendOptions& opts);
  void validate(const StepBatch& b) const;
  // Runs `checks` (of a batch, or of run_layer's inputs); when they throw in a replica that steps in
  // lockstep, first takes part in the step's collectives with no tokens (a whole forward, or one layer), so
  // the other replicas are not left waiting, then rethrows.
  void refuse_in_step(bool one_layer, const std::function<void()>& checks);
  // Each new token's position, and the token rows whose logits the step needs.
  static void step_layout(const StepBatch& b, std::vector<int32_t>& positions, std::vector<int64_t>& rows);
  // Runs fn on every rank (rank 0 on this thread, the others on their own), rethrowing the first failure;
  // a failing rank aborts the collectives so the others return too.
  void on_ranks(const std::function<void(Rank&)>& fn);
  // The draft head after a step's sampling (`out`): catches up on every sequence's tokens whose successor
  // is now known (K/V of the head at their positions) and proposes what sequences asked for.
  void run_head(const StepBatch& b, const std::vector<float>& aux, StepOutput& out);

  std::shared_ptr<Group> group_;
  int replica_ = 0;
  int32_t lockstep_ = 1;  // replicas whose forward() calls must run together (this one included)
  KvCacheSpec spec_;
  KvCacheDtype kv_dtype_ = KvCacheDtype::kBf16;
  std::shared_ptr<Communicator> process_group_;
  // write_kv's pages from their bytes, wherever they lie.
  void write_pages(std::span<const uint8_t> full_bytes, std::span<const uint8_t> sliding_bytes,
                   std::span<const int32_t> full_pages, std::span<const int32_t> sliding_pages);
  // The share's one range, checked and its object mapped (cached); throws orchid::Error otherwise.
  const KvShareRank& shared_range(const KvShare& share);
  static void remove_stale_exports();
  uint64_t share_bytes_ = 0;
  int64_t share_timeout_ms_ = 60000;
  mutable std::mutex share_mu_;
  std::optional<SharedMemory> export_;
  std::unique_ptr<KvShareLeases> leases_;
  std::map<std::string, SharedMemory> peers_;  // objects of other instances, by name
  std::vector<std::unique_ptr<Rank>> ranks_;   // this replica's

  std::unique_ptr<CpuEagle3Head> head_;
  Eagle3PendingRows pending_rows_;  // the head's rows waiting for the next chunk (eagle3_rows.h)
};

}  // namespace orchid::runtime::cpu
