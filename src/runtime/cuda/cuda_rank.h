// One rank of the CUDA backend (the per-GPU executor): its shard of the weights (model/parallel.h), its KV
// heads' pools, a fixed workspace, a stream and its decode graphs. The model's forward is written once, over
// "a rank's shard", with the collectives where the split needs them; CudaBackend (cuda_backend.h) is the
// Backend face over the ranks. With one rank (one GPU, the default) no collective runs and the step is what
// it always was: a step uploads its metadata in one copy, runs every layer without host synchronisation,
// and synchronises once to return the sampled ids.
//
// Per layer (x: fp32 residual stream [T, H], replicated on every rank):
//   h = rmsnorm(x)                 -> qkv = h Wqkv^T (this rank's heads)  -> bias + YaRN RoPE, K/V into pages
//   attn = sink attention over this rank's heads (prefill tiles + split-KV decode)
//   o = attn Wo^T (+ bo on TP rank 0)   [TP > 1: fp32 partial sums, all-reduce over the TP group]
//   h = rmsnorm(x += o)            -> MoE(h): router over every expert, this rank's experts computed
//                                     [EP > 1: each rank stores its part, all-reduce over the EP group, x +=]
// Final norm and lm_head (this rank's vocabulary rows; TP > 1: all-gather of the logits) run only on the
// rows that need logits; rank 0 samples.
//
// Precise routing (default; --bf16-routing turns it off). A token whose 4th and 5th router logits are close
// flips an expert on the smallest rounding, and one flipped expert outweighs every other error of the layer
// (bench/RESULTS.md: the layer error vs fp32 is 7-10x below transformers' BF16 on tokens routed alike).
// So (1) every layer's post-attention norm writes its output as two BF16 halves (hi + lo, 16 significant
// bits): the experts read hi, the router one GEMM over hi and lo rows; (2) layer 0, where the residual is
// the bare embedding and BF16 attention alone moves router logits by 2-5e-2, runs its attention block above
// BF16 (precise_layer(): split-input fp32 QKV and O projections, fp32 RoPE, fp32 KV pages, fp32 attention,
// precise_attention.h). Cost, measured: about 2% of prefill, 1% of decode.
#pragma once

#include <cuda_runtime.h>

#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <functional>
#include <span>
#include <string>
#include "kernels/attention/attention_plan.h"
#include "kernels/attention/rope_kv_write.h"
#include "kernels/gemm/dense_gemm.h"
#include "kernels/moe/moe_layer.h"
#include "kernels/ops/ops.h"
#include "model/loader.h"
#include "model/parallel.h"

#include "runtime/backend.h"
#include "runtime/cuda/cuda_backend_options.h"
#include "runtime/cuda/cuda_eagle3.h"
#include "runtime/cuda/device_communicator.h"
#include "runtime/cuda/device_memory.h"
#include "runtime/cuda/device_weights.h"
#include "runtime/cuda/gpu_sampler.h"
#include "runtime/kv_memory_plan.h"

namespace orchid::runtime::cuda {

struct CudaRankSetup {
  model::ModelRef ref;
  model::ModelConfig config;  // the whole model
  model::RankShard shard;     // what this rank holds
  CudaBackendOptions opts;
  int device = 0;
  size_t memory_budget = 0;  // bytes this rank may use on its device (runtime/kv_memory_plan.h)
  DeviceCommunicator* tp = nullptr;
  DeviceCommunicator* ep = nullptr;
};

class CudaRank {
 public:
  // Loads the shard and carves the workspace; the KV pools come with allocate_kv once the ranks agree.
  explicit CudaRank(const CudaRankSetup& s);
  ~CudaRank();
  CudaRank(const CudaRank&) = delete;
  CudaRank& operator=(const CudaRank&) = delete;

  // The pools this rank's memory allows (the backend takes the smallest over the ranks), then allocates.
  KvCacheSpec kv_capacity() const;
  void allocate_kv(const KvCacheSpec& spec);

  // One step; rank 0 returns the samples (and logits asked for), the other ranks an empty output.
  StepOutput forward(const StepBatch& b);
  // Pipelined steps (Backend::launch; one rank): a step that draws tokens without drafts, masks, penalties,
  // logits or a draft head (prompt chunks may ride along) is enqueued, and collect() waits for its event
  // and reads its result slot; any other step runs through forward() at launch. Tokens taken from the step
  // before (StepBatch::from_previous) are copied on the device from its draws (upload_step).
  void launch(const StepBatch& b);
  StepOutput collect();
  // A step launched with masks_later: its masks are written now; its sampling and the copy of its draws
  // are enqueued behind its graph (or layers).
  void supply_masks(const StepBatch& b);
  // K/V handoff (Backend::read_kv): this rank's pages appended to `full` / `sliding`, layer by layer, K then
  // V, page by page; write_pages takes them back from `at` offsets in the same order (kNoPage: skipped).
  void read_pages(std::span<const int32_t> full_pages, std::span<const int32_t> sliding_pages,
                  std::vector<uint8_t>& full, std::vector<uint8_t>& sliding);
  void write_pages(std::span<const int32_t> full_pages, std::span<const int32_t> sliding_pages,
                   const std::vector<uint8_t>& full, const std::vector<uint8_t>& sliding, size_t& at_full,
                   size_t& at_sliding);
  std::string kv_layout() const;
  // K/V handed over in place over CUDA IPC (runtime/kv_share.h). share_region(): what a peer opens to read
  // this rank's export buffer (its IPC handle and size; "" without one). handoff_bytes(): this rank's bytes
  // of the pages' full and sliding parts. share_pages() copies the pages into the export buffer at
  // `offset` (full pages, then sliding ones, in the handoff order); take_shared_pages() copies this rank's
  // heads of them from the buffers of the sender ranks that hold those heads (the sender may be split in
  // other tensor-parallel ranks: runtime/kv_reshard.h, head_runs), mapped by open_peer(), which any thread
  // may call.
  std::string share_region() const;
  std::pair<uint64_t, uint64_t> handoff_bytes(std::span<const int32_t> full_pages,
                                              std::span<const int32_t> sliding_pages) const;
  void share_pages(std::span<const int32_t> full_pages, std::span<const int32_t> sliding_pages,
                   uint64_t offset);
  void open_peer(const std::string& region);
  void take_shared_pages(std::span<const int32_t> full_pages, std::span<const int32_t> sliding_pages,
                         const KvShare& share);
  // The sender ranks of a share of `from` ranks whose heads this rank holds.
  std::vector<int> share_senders(int from) const;
  std::vector<float> run_layer(int64_t layer, const std::vector<float>& x, int64_t n,
                               std::vector<int32_t>* topk);
  int device() const { return device_; }
  // The batch buckets of decode graphs (Backend::decode_graph_batches): empty when steps run eagerly.
  std::vector<int32_t> decode_graph_batches() const;
  // Tokens the EAGLE-3 head proposes a sequence and step (0: no head on this rank).
  int32_t max_proposals() const { return head_ ? opts_.max_draft_tokens : 0; }
  // Prefill attention through the Hopper kernel (its tensor maps need pages of >= 8 tokens).
  // The Hopper prefill kernel reads BF16 pages of >= 8 tokens; FP8 pages take the mma.sync kernel.
  bool use_hopper_prefill() const {
    return opts_.hopper_prefill_attention && opts_.page_size >= 8 && !kv_fp8();
  }
  bool kv_fp8() const { return opts_.kv_cache_dtype == KvCacheDtype::kFp8E4M3; }
  // Bytes of one page of layer l's K (or V) pool: e4m3, bf16, or fp32 for the precise layer.
  size_t kv_page_bytes(int64_t l, int32_t page_size) const;
  size_t weight_bytes() const { return weights_.arena.used(); }

 private:
  // Every page of `full_pages` / `sliding_pages` in the handoff order (layer, K then V, page), with its
  // device address (null for kNoPage) and size.
  void for_each_kv_page(std::span<const int32_t> full_pages, std::span<const int32_t> sliding_pages,
                        const std::function<void(bool sliding, uint8_t* page, size_t bytes)>& fn) const;

  // A step's metadata on the device (one upload): token ids, page tables, logits rows and the attention plan.
  struct StepMeta {
    const int32_t *tokens = nullptr, *full = nullptr, *sliding = nullptr, *rows = nullptr;
    kernels::attention::AttentionPlan plan;
  };
  // The step workspace's bytes for the options (and its capacities); allocate: also takes it and carves it.
  size_t plan_workspace(bool allocate);
  // The KV pools' plan for a cache of `dtype` next to `allocated` bytes (kv_pages > 0: that many pages).
  KvPoolPlan plan_kv(KvCacheDtype dtype, int32_t kv_pages, size_t allocated) const;
  // Uploads the step's metadata at fixed offsets of the metadata buffer (so a captured graph's pointers stay
  // valid); `tokens` may be padded beyond the batch's own. Page tables: only the bytes that changed since
  // the last step go over the bus (the host buffer mirrors the device's).
  StepMeta upload_step(const std::vector<int32_t>& tokens, const StepBatch& b,
                       const std::vector<int32_t>& rows, const kernels::attention::PlanOptions& po);
  kernels::attention::PlanOptions make_plan_options() const;  // once, at construction
  // Every layer on the step's T rows; with a head, the residual stream at its aux layers goes to its aux().
  void run_layers(const StepMeta& m, int64_t T);
  // One layer. input_normed: h_ already holds this layer's input norm of x_ (the layer before did it in
  // its MoE combine); next_norm: the next layer's input norm to do so (null: none). Returns whether it did.
  bool layer(int64_t l, const StepMeta& m, int64_t T, bool input_normed = false,
             const float* next_norm = nullptr);
  void precise_layer(int64_t l, const StepMeta& m, int64_t T);
  bool moe(int64_t l, int64_t T, bool split_input, const float* next_norm = nullptr,
           const kernels::MoeInputNorm* in_norm = nullptr);
  void compute_logits(const int32_t* d_rows, int64_t rows);
  // Decode of T token rows (one or 1 + k per sequence, every one sampled): embedding, every layer, logits,
  // then (rank 0) the arg-max or the GPU sampler over the uploaded parameters; what a graph captures.
  // How a captured decode step picks its tokens: the arg-max kernel, the GPU sampler, or not at all (steps
  // with allowed-token masks sample after the graph, once the engine's masks are ready).
  enum class DecodePick { kArgmax = 0, kSampler = 1, kAfterGraph = 2 };
  void decode_body(const StepMeta& m, int64_t T, DecodePick pick);
  bool graphable(const StepBatch& b) const;
  bool launchable(const StepBatch& b) const;
  void launch_now(const StepBatch& b);  // launch() of a step whose masks are known
  // A step's samples on their way to one of the two host result slots (the arg-max buffers or the
  // sampler's); `done` holds the output once read, or of a step forward() ran at launch.
  struct Launched {
    bool ready = false;
    bool awaiting_masks = false;  // launched with masks_later: logits computed, sampling not enqueued
    StepOutput done;
    int slot = 0;
    bool sampler = false;
    int64_t rows = 0;
  };
  // launch: enqueue everything, the samples' copy to the host included, and leave them in launched_.
  StepOutput forward_graph(const StepBatch& b, bool launch);
  StepOutput forward_eager(const StepBatch& b, bool launch);
  // Enqueues the copy of the step's `rows` samples into the next result slot and records its event.
  Launched download_samples(bool sampler, int64_t rows);
  std::vector<SampledToken> read_samples(const Launched& l) const;
  Launched awaiting_masks(int64_t rows);
  Launched enqueued_elsewhere();  // a launched step of a rank that does not sample
  // Several ranks: rank 0 alone draws, and a pipelined step's tokens come from its draws. Every rank takes
  // rank 0's n words at `data` (an all-gather of the tokens, enqueued: the step stays overlapped).
  void take_rank0_rows(int32_t* data, int64_t n);
  // Rank 0's host copy of the draws a step reads (`mine` on rank 0), on every rank; waits for the device.
  std::vector<int32_t> rank0_previous(const StepBatch& b, std::vector<int32_t> mine);
  size_t gather_block() const;  // words a rank's block of d_gathered_ holds
  void settle(Launched& l);     // waits for its event and reads its slot
  // Where the last step's draws lie on the device (for the next step's from_previous); null: not usable.
  void set_previous(const int32_t* ids, int64_t stride, int64_t rows);

  CudaBackendOptions opts_;
  model::ModelConfig config_;                     // the whole model
  model::ModelConfig local_;                      // this rank's attention: its query and KV heads
  kernels::attention::PlanOptions plan_options_;  // every step's plan starts from these
  model::RankShard shard_;
  int device_ = 0;
  size_t budget_ = 0;
  DeviceCommunicator* tp_ = nullptr;
  DeviceCommunicator* ep_ = nullptr;
  bool samples_ = true;  // rank 0: samples and returns the step's output
  bool graphs_ok_ = true;
  KvCacheSpec spec_;
  cudaStream_t stream_ = nullptr;
  DeviceWeights weights_;
  kernels::MoeConfig moe_cfg_;
  kernels::attention::RopeTable rope_{};
  std::vector<int64_t> layer_slot_;  // index among the layers of its kind

  // Runs the span copies on the stream (one launch) and waits for them.
  void copy_spans(const std::vector<kernels::ops::CopySpan>& spans);
  DeviceBuffer share_;  // the export buffer (opts_.kv_share_bytes)
  std::string share_region_;
  DeviceBuffer spans_;  // copy_spans' list on the device, grown as needed
  mutable std::mutex peers_mu_;
  std::map<std::string, std::pair<uint8_t*, uint64_t>> peers_;  // region -> mapping and size

  // KV pools: per layer K and V, [pages][Hkv][page_size][64] bf16 or e4m3 (--kv-cache-dtype; fp32 for the
  // precise layer).
  DeviceBuffer kv_;
  std::vector<void*> k_pool_, v_pool_;
  int64_t precise_layer_ = -1;  // layer run by precise_layer() (layer 0 when sliding), or -1

  // Workspace (sized for max_step_tokens / max_step_seqs).
  DeviceArena ws_;
  float* x_ = nullptr;
  __nv_bfloat16 *h_ = nullptr, *qkv_ = nullptr, *q_ = nullptr, *attn_ = nullptr, *o_ = nullptr;
  float* qkv_f32_ = nullptr;   // the same memory as qkv_, fp32 rows for the precise layer
  float* o_f32_ = nullptr;     // TP > 1: the O projection's partial sums
  float* moe_part_ = nullptr;  // EP > 1: this rank's part of the MoE output
  void* moe_ws_ = nullptr;
  void* attn_ws_ = nullptr;
  size_t attn_ws_bytes_ = 0;  // what every plan needs (decode and prefill workspace bounds)
  float *x_sel_ = nullptr, *logits_ = nullptr, *d_logprobs_ = nullptr;
  float *logits_mine_ = nullptr, *logits_parts_ = nullptr;  // TP > 1: this rank's vocabulary rows; gathered
  __nv_bfloat16* h_sel_ = nullptr;
  int32_t* d_ids_ = nullptr;
  int64_t logits_rows_cap_ = 0;
  int64_t sampled_rows_cap_ = 0;  // max_step_seqs * (1 + max_draft_tokens)
  std::unique_ptr<kernels::DenseGemm> gemm_;
  std::unique_ptr<GpuSampler> sampler_;
  std::unique_ptr<CudaEagle3Head> head_;  // rank 0, with --speculative-config eagle3

  // Step metadata: one host (pinned) and one device buffer of the same layout, regions at fixed offsets.
  size_t meta_cap_ = 0;
  size_t off_tokens_ = 0, off_blob_ = 0, off_rows_ = 0, off_full_ = 0, off_sliding_ = 0;
  size_t cap_tokens_ = 0, cap_blob_ = 0, cap_rows_ = 0, cap_table_ = 0;
  size_t table_bytes_[2] = {0, 0};  // page-table bytes on the device (full, sliding): the mirror's extent
  std::map<int, cudaGraphExec_t> graphs_;  // by (batch bucket * 64 + tokens a sequence) * 4 + DecodePick
  uint8_t* h_meta_ = nullptr;
  uint8_t* d_meta_ = nullptr;
  int32_t* d_gathered_ = nullptr;       // several ranks: tp size + 1 blocks of gather_block() words
  int32_t* h_ids_ = nullptr;            // two result slots of sampled_rows_cap_
  float* h_logprobs_ = nullptr;         // the same
  size_t off_prev_ = 0, cap_prev_ = 0;  // StepBatch::from_previous pairs in the metadata buffers
  // Pipelining: staged_ passes once the last step's host-to-device copies (from h_meta_ and the sampler's
  // pinned parameters) have run; done_[slot] once a step's samples are in that host slot.
  cudaEvent_t staged_ = nullptr, done_[2] = {nullptr, nullptr};
  int slot_ = 0;  // the next step's result slot
  std::deque<Launched> launched_;
  std::unique_ptr<StepBatch> masks_to_come_;  // launched with masks_later, to run through forward() then
  std::vector<int32_t> last_read_tokens_;     // the draws of the last step collect() returned
  const int32_t* prev_ids_ = nullptr;
  int64_t prev_stride_ = 1, prev_rows_ = 0;
  kernels::attention::AttentionPlanBuilder plan_;
};

}  // namespace orchid::runtime::cuda
