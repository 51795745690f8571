// Attention with per-head sinks over the paged KV cache (gpt-oss-model.md §3), head_dim 64, GQA with any
// integer ratio Hq / Hkv (<= 64 for decode, <= 128 for prefill), causal, full or sliding window.
//   s_t = (q . k_t) * softmax_scale, for allowed keys t: t <= p and (window == 0 or t > p - window)
//   P_t = exp(s_t) / (sum_t' exp(s_t') + exp(sink_h))    (sink raw, not scaled; it takes part in the max)
//   out = sum_t P_t v_t          (fp32 softmax and accumulation, bf16 operands and output)
// A sequence's new tokens are its queries (positions start_pos ..); its keys are every cached position
// 0 .. p, read through its page table, so the K/V of the new tokens must already be written (rope_kv_write).
//
// Prefill (sequences with num_q > 1): one CTA = one KV head x (rows / G) query tokens x the G query heads of
// that KV head: an FA2-style mma.sync kernel (128 rows, 64-key tiles, 3-stage cp.async pipeline; the
// reference path) or the Hopper kernel (128 or 192 rows, TMA + wgmma; what the CUDA runtime runs), chosen by
// PrefillVariant; the plan's PlanOptions::prefill_rows must match.
// Decode (a sequence's few query tokens: one, or 1 + k in a speculative verify step; attention_plan.h
// decides): one CTA per (split, KV head, decode slot) with the tokens x G query rows padded to m16 tiles;
// when plan.decode_splits > 1 the splits write partial results to `workspace` and a merge kernel adds the
// sink once and writes the output. The decode grid depends only on the plan's bucket sizes and decode_q, so
// a decode or verify step can be captured in a CUDA graph.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/attention/attention_plan.h"

namespace orchid::kernels::attention {

// Prefill implementation: the FA2-style mma.sync kernel (128-row tiles, any page size), or the Hopper kernel
// (TMA producer warp + wgmma consumer warpgroups; plans of 128 or 192 rows, PlanOptions::prefill_rows;
// pages of >= 8 tokens; needs num_pages).
enum class PrefillVariant : uint8_t { kMmaSync, kHopper };

struct SinkAttentionArgs {
  const __nv_bfloat16* q = nullptr;  // [num_tokens, Hq, 64] (roped)
  const void* k_pool = nullptr;      // this layer's pools (kv_layout.h): bf16, or e4m3 bytes with kv_fp8
  const void* v_pool = nullptr;
  // FP8 KV cache (kv_layout.h): the pools hold e4m3(x / scale) with one fp32 scale per KV head for K and one
  // for V ([Hkv] on the device; null: 1.0). K's scale is folded into the softmax scale, V's into the output.
  // The MMAs then run on f16 (e4m3 widens to f16 exactly; queries are rounded to f16, probabilities too).
  // Prefill takes the mma.sync kernel (the Hopper kernel reads BF16 pages only).
  bool kv_fp8 = false;
  const float* k_scale = nullptr;
  const float* v_scale = nullptr;
  const int32_t* page_table = nullptr;  // flat table of this layer's kind
  TableKind table_kind = kFullTable;
  int page_size = 16;            // power of two
  int64_t num_pages = 0;         // pages in each of k_pool / v_pool (the Hopper prefill kernel's tensor maps)
  const float* sinks = nullptr;  // [Hq] raw sink logits (fp32), or null for plain softmax
  int window = 0;                // keys per query including itself (gpt-oss sliding layers: 128); 0 = full
  float softmax_scale = 0.125f;  // 1 / sqrt(64)
  __nv_bfloat16* out = nullptr;  // [num_tokens, Hq * 64]
  PrefillVariant prefill_variant = PrefillVariant::kMmaSync;
  // The Hopper prefill kernel's persistent CTAs, each looping over work items (tile x KV head): 0 = one per
  // SM (or one per item with ORCHID_PREFILL_PERSISTENT=0). Tests take a few, so that every CTA serves many
  // items of different lengths.
  int prefill_ctas = 0;
  // The BF16 decode kernel's K/V ring depth: 0 = by the grid (decode_attention.cu), 3 or 4 forced (tests:
  // the same bits either way).
  int decode_stages = 0;
  // The Hopper kernel's window-tile output rows (a warp's 2 whole tokens x 8 heads) by one tensor store a
  // warp instead of 16-byte stores: -1 = as ORCHID_PREFILL_TMA_STORE says (on unless it is 0), 0 / 1 as
  // given (tests: the same bits either way).
  int prefill_tma_store = -1;
};

// The Hopper prefill kernel serves these arguments (BF16 pages of >= 8 tokens); callers fall back to
// PrefillVariant::kMmaSync otherwise.
inline bool hopper_prefill_supports(const SinkAttentionArgs& a) {
  return !a.kv_fp8 && a.page_size >= 8;
}

// Prefill part of the plan (no-op without prefill tiles). `workspace` holds the plan's workspace_bytes() when
// it splits the keys of prefill tiles (num_split_tiles > 0; the Hopper kernel's full-attention launches
// then write the pieces' partial results there and a merge kernel adds them up); may be null otherwise.
void sink_attention_prefill(const SinkAttentionArgs& args, const AttentionPlan& plan, void* workspace,
                            cudaStream_t stream);

// Decode part of the plan (no-op with decode_bucket 0). `workspace` holds decode_workspace_bytes(...) bytes
// when plan.decode_splits > 1 (may be null otherwise).
void sink_attention_decode(const SinkAttentionArgs& args, const AttentionPlan& plan, void* workspace,
                           cudaStream_t stream);

// Both (the prefill launches are done with the workspace before the decode launch uses it).
inline void sink_attention(const SinkAttentionArgs& args, const AttentionPlan& plan, void* workspace,
                           cudaStream_t stream) {
  sink_attention_prefill(args, plan, workspace, stream);
  sink_attention_decode(args, plan, workspace, stream);
}

}  // namespace orchid::kernels::attention
