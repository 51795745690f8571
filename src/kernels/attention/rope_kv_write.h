// QKV bias + YaRN RoPE + paged KV write: the step between the fused QKV GEMM (no bias) and attention.
// For each token t of the plan (at position pos = plan.token_pos[t]):
//   x = float(qkv[t]) + float(bias)                                  (q | k | v, head-major, 64 dims per
//   head) q, k heads: half-split (NeoX) rotation, pair (j, j + 32) by angle = float(pos) * inv_freq[j] in
//   fp32,
//     cos/sin of that fp32 angle (accurately, not the fast intrinsics) times the YaRN concentration:
//     x1' = x1 * cos - x2 * sin,  x2' = x2 * cos + x1 * sin   (fp32, no fused multiply-add, one bf16
//     rounding)
//   q -> q_out [T, Hq, 64];  k, v -> the layer's K/V pools at page = table[pos / page_size],
//   slot = pos % page_size (kv_layout.h). A kNoPage entry means the write is skipped (never dereferenced).
// With kv_fp8, k and v go to the pools as e4m3(x / scale) instead (sink_attention.h reads them).
// Padding tokens (plan.token_seq[t] < 0) are skipped. With fp32 the same arithmetic without the final
// rounding; q_out may then alias qkv (each thread reads its elements before it writes them back).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/attention/attention_plan.h"

namespace orchid::kernels::attention {

// Host-computed rotary table for head_dim 64 (see yarn.h), passed to the kernel by value.
struct RopeTable {
  float inv_freq[32];
  float concentration;
};

struct RopeKvWriteArgs {
  // Element type of qkv, q_out and the pools: bf16, or fp32 for precise layers (cuda_backend.h), where qkv
  // is the fp32 output of the split-input QKV GEMM and the layer's K/V pools hold fp32 (no rounding at all).
  bool fp32 = false;
  const void* qkv = nullptr;   // [num_tokens, (Hq + 2 Hkv) * 64], rows 16-byte aligned
  const void* bias = nullptr;  // [(Hq + 2 Hkv) * 64] bf16 or fp32 (bias_fp32), or null
  bool bias_fp32 = false;
  RopeTable rope{};
  void* q_out = nullptr;   // [num_tokens, Hq, 64], rows q_stride elements apart; may be qkv itself
  int q_stride = 0;        // 0: Hq * 64
  void* k_pool = nullptr;  // this layer's pools (kv_layout.h)
  void* v_pool = nullptr;
  // FP8 KV cache (bf16 rows only): the pools hold e4m3(x / scale), rounded once from the fp32 result
  // (saturating at +-448, to nearest even), with one fp32 scale per KV head for K and for V ([Hkv] on the
  // device; null: 1.0).
  bool kv_fp8 = false;
  const float* k_scale = nullptr;
  const float* v_scale = nullptr;
  const int32_t* page_table = nullptr;  // flat table of this layer's kind
  TableKind table_kind = kFullTable;
  int page_size = 16;
};

// Sizes (heads, tokens) come from the plan. Launches nothing for zero tokens.
void rope_kv_write(const RopeKvWriteArgs& args, const AttentionPlan& plan, cudaStream_t stream);

}  // namespace orchid::kernels::attention
