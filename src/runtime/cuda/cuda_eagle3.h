// An EAGLE-3 draft head on the CUDA backend (model/eagle3.h has the math and the format; the CPU backend's
// cpu_eagle3.h is the reference it follows). It lives on rank 0, whose residual stream is the whole model's
// after every collective, so it serves any --tp / --ep.
//
// In a step: the target's layer loop copies the residual stream at the aux layers into aux() (BF16, what the
// head's fc reads); after sampling, run() catches the head up on the step's rows that are now the
// sequences' (each row pairs its fc(aux) with the token that follows it) and then drafts up to k tokens a
// sequence, feeding each draft step's output back one position on. The head's K/V is one more full layer
// addressed by the target's page tables, so rejected drafts roll back with the target's (the next step
// rewrites those positions). A draft chain runs ahead of its sequence: its positions go to the slots past
// the end of the sequence's own last page (no other sequence shares a page that is not full), then to
// scratch pages past the pool's, through a chain page table made for the run. The attention is the
// target's kernel (sink_attention.h) without sinks, over a plan made for the head's rows.
//
// Drafts are the arg-max of the head's distribution for every request; sampled requests accept them by the
// target's own draws (runtime/sampler.h), so the output distribution is the target's either way.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/attention/attention_plan.h"
#include "kernels/eagle3/eagle3_ops.h"
#include "kernels/gemm/dense_gemm.h"
#include "model/eagle3.h"
#include "runtime/backend.h"
#include "runtime/cuda/device_memory.h"
#include "runtime/eagle3_rows.h"

namespace orchid::runtime::cuda {

struct CudaEagle3Sizes {
  int64_t max_step_tokens = 0;  // rows of aux() and of the fc output
  int64_t max_step_seqs = 0;
  int32_t max_proposals = 0;  // drafts a sequence and step
  int32_t page_size = 16;
  int64_t max_pages_per_seq = 0;  // page-table entries a sequence may have
};

class CudaEagle3Head {
 public:
  // Checks that the head fits this backend (64-wide heads, no norm before fc) with a clear message.
  static void check_supported(const model::Eagle3Config& c);
  // Device bytes of the head's weights and workspace (not its K/V pool).
  static size_t bytes_needed(const model::Eagle3Config& c, const CudaEagle3Sizes& sizes);
  // K/V bytes a page of the head's pool takes (K and V).
  static size_t page_bytes(const model::Eagle3Config& c, int32_t page_size);

  // `target_embedding`: the target's BF16 table on the device, used unless the head has its own.
  CudaEagle3Head(model::Eagle3Head head, const __nv_bfloat16* target_embedding, const CudaEagle3Sizes& sizes,
                 cudaStream_t stream);

  const model::Eagle3Config& config() const { return head_.config; }
  // The aux states of a step's token rows: [max_step_tokens, 3 * hidden] BF16, slot i of a row at columns
  // i * hidden.. (CudaRank fills it with kernels::eagle3::f32_to_bf16_cols).
  __nv_bfloat16* aux() const { return aux_; }
  void allocate_kv(int32_t num_full_pages);
  // Weights, workspace and the scratch pages (not the K/V pages the pool plan counts).
  size_t device_bytes() const;

  // After the target's sampling of step `b` (out.samples: each sampled sequence's accepted run, its last
  // token the new one; out.num_accepted when drafted): appends every sampled sequence's proposals to
  // out.num_proposals / out.proposals. `d_full_table`: the step's full page table on the device.
  void run(const StepBatch& b, const int32_t* d_full_table, kernels::DenseGemm& gemm, StepOutput& out);

 private:
  // The layer on n rows: g [n, H] fp32 (not modified), tokens/rows on the device; writes K/V and pre (fp32).
  // `rows` (host, uploaded to d_rows_ here) are a run of each sequence's consecutive positions, whose
  // page tables start at rows[i].table_begin of `table` (device).
  void layer(std::span<const kernels::eagle3::HeadRow> rows, const float* g, const int32_t* tokens,
             const int32_t* table, float* pre, kernels::DenseGemm& gemm);
  int32_t scratch_pages_per_seq() const;

  model::Eagle3Head head_;
  CudaEagle3Sizes sizes_;
  cudaStream_t stream_ = nullptr;
  int64_t chunk_rows_ = 0;  // head rows per pass of layer()
  DeviceArena arena_;
  DeviceBuffer kv_;
  int32_t num_pages_ = 0;
  kernels::eagle3::RopeFreqs freqs_{};
  // Weights (BF16; norms fp32).
  const __nv_bfloat16* embedding_ = nullptr;
  __nv_bfloat16 *fc_ = nullptr, *qkv_w_ = nullptr, *o_w_ = nullptr, *gate_up_w_ = nullptr, *down_w_ = nullptr,
                *lm_head_ = nullptr;
  float *input_norm_ = nullptr, *hidden_norm_ = nullptr, *post_norm_ = nullptr, *final_norm_ = nullptr;
  int32_t* d2t_ = nullptr;
  // Workspace.
  __nv_bfloat16* aux_ = nullptr;
  float* g_all_ = nullptr;  // fc of the step's rows, then the pending rows (chunk boundaries) after them
  float *g_ = nullptr, *pre_ = nullptr, *emb_ = nullptr, *logits_ = nullptr;
  float *cur_ = nullptr, *nxt_ = nullptr;  // the draft chain's rows, one a proposing sequence
  __nv_bfloat16 *e_ = nullptr, *hn_ = nullptr, *x_ = nullptr, *qkv_ = nullptr, *q_ = nullptr,
                *attn_ = nullptr, *h_ = nullptr, *gu_ = nullptr, *act_ = nullptr;
  kernels::attention::AttentionPlanBuilder plan_;
  kernels::attention::PlanOptions plan_options_;
  uint8_t* d_blob_ = nullptr;
  size_t blob_cap_ = 0;
  void* decode_ws_ = nullptr;
  size_t decode_ws_bytes_ = 0;
  int32_t* d_chain_table_ = nullptr;  // [max_step_seqs][max_pages_per_seq + scratch pages]
  int32_t *d_index_ = nullptr, *d_tokens_ = nullptr, *d_sel_ = nullptr, *d_ids_ = nullptr,
          *d_props_ = nullptr;
  float* d_logprobs_ = nullptr;
  kernels::eagle3::HeadRow* d_rows_ = nullptr;
  Eagle3PendingRows pending_;  // rows waiting for the next chunk (eagle3_rows.h)
};

}  // namespace orchid::runtime::cuda
