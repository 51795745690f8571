// The CUDA backend on one Hopper GPU: weights, a paged KV pool sized to --gpu-memory-utilization and a fixed
// workspace are allocated once; a step uploads its metadata in one copy, runs every layer without host
// synchronisation, and synchronises once to return the sampled ids.
//
// Per layer (x: fp32 residual stream [T, H]):
//   h = rmsnorm(x)                 -> qkv = h Wqkv^T (cuBLASLt)  -> bias + YaRN RoPE, K/V into the pages
//   attn = sink attention (prefill tiles + split-KV decode)      -> o = attn Wo^T + bo
//   h = rmsnorm(x += o)            -> x += MoE(h)  (router, top-4, grouped expert GEMMs, weighted combine)
// Final norm and lm_head run only on the rows that need logits.
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

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kernels/attention/attention_plan.h"
#include "kernels/attention/rope_kv_write.h"
#include "kernels/gemm/dense_gemm.h"
#include "kernels/moe/moe_layer.h"
#include "model/loader.h"
#include "runtime/backend.h"
#include "runtime/cuda/device_memory.h"
#include "runtime/cuda/device_weights.h"
#include "runtime/cuda/gpu_sampler.h"

namespace orchid::runtime::cuda {

struct CudaBackendOptions {
  std::string weights = "mxfp4";  // expert format: mxfp4 | fp8 | bf16
  int32_t page_size = 16;
  int32_t max_step_tokens = 16384;  // --max-num-batched-tokens
  int32_t max_step_seqs = 256;      // --max-num-seqs
  int64_t max_model_len = 131072;   // page-table capacity per sequence
  double gpu_memory_utilization = 0.90;
  int32_t kv_pages = 0;  // full-attention pages (0: everything the memory plan leaves)
  bool cuda_graphs =
      true;  // replay captured graphs for greedy decode steps (vLLM's --enforce-eager turns off)
  // Routing as an fp32 model would route (see above); --bf16-routing turns it off.
  bool precise_routing = true;
};

bool cuda_device_available();

class CudaBackend final : public Backend {
 public:
  CudaBackend(const std::string& model_arg, const CudaBackendOptions& opts);
  ~CudaBackend() override;

  std::string name() const override { return "cuda"; }
  const model::ModelConfig& model_config() const override { return config_; }
  KvCacheSpec kv_spec() const override { return spec_; }
  int32_t max_step_tokens() const override { return opts_.max_step_tokens; }
  int32_t max_step_seqs() const override { return opts_.max_step_seqs; }
  StepOutput forward(const StepBatch& batch) override;
  std::vector<float> run_layer(int64_t layer, const std::vector<float>& x, int64_t n,
                               std::vector<int32_t>* topk) override;

 private:
  // A step's metadata on the device (one upload): token ids, page tables, logits rows and the attention plan.
  struct StepMeta {
    const int32_t *tokens = nullptr, *full = nullptr, *sliding = nullptr, *rows = nullptr;
    kernels::attention::AttentionPlan plan;
  };
  void plan_memory();
  void validate(const StepBatch& b) const;
  // Uploads the step's metadata at fixed offsets of the metadata buffer (so a captured graph's pointers stay
  // valid); `tokens` may be padded beyond the batch's own.
  StepMeta upload_step(const std::vector<int32_t>& tokens, const StepBatch& b,
                       const std::vector<int32_t>& rows, const kernels::attention::PlanOptions& po);
  kernels::attention::PlanOptions plan_options() const;
  void layer(int64_t l, const StepMeta& m, int64_t T);
  void precise_layer(int64_t l, const StepMeta& m, int64_t T);
  void compute_logits(const int32_t* d_rows, int64_t rows);
  // Decode of one token per sequence: embedding, every layer, logits, then the arg-max or (sampler) the GPU
  // sampler over the uploaded parameters; what a graph captures.
  void decode_body(const StepMeta& m, int64_t T, bool sampler);
  bool graphable(const StepBatch& b) const;
  StepOutput forward_graph(const StepBatch& b);

  CudaBackendOptions opts_;
  model::ModelConfig config_;
  KvCacheSpec spec_;
  cudaStream_t stream_ = nullptr;
  DeviceWeights weights_;
  kernels::MoeConfig moe_cfg_;
  kernels::attention::RopeTable rope_{};
  std::vector<int64_t> layer_slot_;  // index among the layers of its kind

  // KV pools: per layer K and V, [pages][Hkv][page_size][64] bf16 (fp32 for the precise layer).
  DeviceBuffer kv_;
  std::vector<void*> k_pool_, v_pool_;
  int64_t precise_layer_ = -1;  // layer run by precise_layer() (layer 0 when sliding), or -1

  // Workspace (sized for max_step_tokens / max_step_seqs).
  DeviceArena ws_;
  float* x_ = nullptr;
  __nv_bfloat16 *h_ = nullptr, *qkv_ = nullptr, *q_ = nullptr, *attn_ = nullptr, *o_ = nullptr;
  float* qkv_f32_ = nullptr;  // the same memory as qkv_, fp32 rows for the precise layer
  void* moe_ws_ = nullptr;
  void* decode_ws_ = nullptr;
  float *x_sel_ = nullptr, *logits_ = nullptr, *d_logprobs_ = nullptr;
  __nv_bfloat16* h_sel_ = nullptr;
  int32_t* d_ids_ = nullptr;
  int64_t logits_rows_cap_ = 0;
  std::unique_ptr<kernels::DenseGemm> gemm_;
  std::unique_ptr<GpuSampler> sampler_;

  // Step metadata: one host (pinned) and one device buffer of the same layout, regions at fixed offsets.
  size_t meta_cap_ = 0;
  size_t off_tokens_ = 0, off_blob_ = 0, off_rows_ = 0, off_full_ = 0, off_sliding_ = 0;
  size_t cap_tokens_ = 0, cap_blob_ = 0, cap_rows_ = 0, cap_table_ = 0;
  std::map<int, cudaGraphExec_t> graphs_;  // decode graphs by 2 * batch bucket + (GPU sampler ? 1 : 0)
  uint8_t* h_meta_ = nullptr;
  uint8_t* d_meta_ = nullptr;
  int32_t* h_ids_ = nullptr;
  float* h_logprobs_ = nullptr;
  kernels::attention::AttentionPlanBuilder plan_;
};

}  // namespace orchid::runtime::cuda
