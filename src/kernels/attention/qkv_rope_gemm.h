// The QKV projection of a few tokens (a decode step's) with the QKV bias, YaRN RoPE and the paged KV write in
// its epilogue: one launch where small_m_gemm (kernels/gemm/small_m_gemm.h) and rope_kv_write
// (rope_kv_write.h) take two. For each token t of the plan, with x = x[t] W^T + bias computed in fp32:
//   q and k heads rotated as rope_kv_write rotates them (half-split pairs (j, j + 32), cos/sin of the fp32
//   angle pos * inv_freq[j] in double, rounded to fp32, times the YaRN concentration; fp32 arithmetic without
//   fused multiply-adds), v as is, each element rounded to bf16 once;
//   q -> q_out [T, Hq, 64] (rows q_stride apart), k and v -> the layer's bf16 pools at page =
//   table[pos / page_size], slot = pos % page_size (kv_layout.h); kNoPage skips the write; padding tokens
//   (plan.token_seq[t] < 0) write nothing.
// Unlike the two-kernel path, the projection is not rounded to bf16 before the bias and the rotation (one
// rounding instead of two), so the bits differ from it by up to about a bf16 ulp.
//
// Why: at one token a layer's RoPE/KV write is a kernel of a few hundred nanoseconds of work that costs ~3-4
// us of launch and dependency latency (120b: 134 us of a 3.08 ms step, H200). The small-m GEMM's CTA owns
// 16 weight rows; taking them as rows j0 + g and j0 + 32 + g of one head (g < 8) puts both members of every
// rotation pair in the same thread's MMA accumulators, so the rotation needs no data exchange.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/attention/attention_plan.h"
#include "kernels/attention/rope_kv_write.h"

namespace orchid::kernels::attention {

constexpr int kQkvRopeGemmMaxTokens = 8;

struct QkvRopeGemmArgs {
  int hidden = 0;                    // k: a multiple of 32
  const __nv_bfloat16* x = nullptr;  // [plan.num_tokens, hidden], 16-byte aligned
  const __nv_bfloat16* w = nullptr;  // [(Hq + 2 Hkv) * 64, hidden] (the fused QKV weight), 16-byte aligned
  const float* bias = nullptr;       // [(Hq + 2 Hkv) * 64] fp32, or null
  RopeTable rope{};
  __nv_bfloat16* q_out = nullptr;   // [num_tokens, Hq, 64], rows q_stride elements apart
  int q_stride = 0;                 // 0: Hq * 64
  __nv_bfloat16* k_pool = nullptr;  // this layer's bf16 pools (kv_layout.h)
  __nv_bfloat16* v_pool = nullptr;
  const int32_t* page_table = nullptr;  // flat table of this layer's kind
  TableKind table_kind = kFullTable;
  int page_size = 16;
};

// Whether the fused kernel serves the step: 1..kQkvRopeGemmMaxTokens tokens, k a multiple of 32, aligned
// pointers, a power-of-two page size.
bool qkv_rope_gemm_supports(const QkvRopeGemmArgs& args, const AttentionPlan& plan);
void qkv_rope_gemm(const QkvRopeGemmArgs& args, const AttentionPlan& plan, cudaStream_t stream);

}  // namespace orchid::kernels::attention
