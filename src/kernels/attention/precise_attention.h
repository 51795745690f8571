// Sink attention of the precise layers (cuda_backend.h) in fp32 on CUDA cores: the same function as
// sink_attention.h (causal, full or sliding window, GQA, the sink in the denominator), but fp32 Q (rotated
// in place in the fp32 QKV rows), fp32 K/V pools, fp32 dot products, softmax and accumulation, and the
// output written as two BF16 halves (hi = bf16(o), lo = bf16(o - hi)) for the split-input O projection.
// Why it exists: at the first layer the residual is the bare embedding, so attention's BF16 roundings
// (Q/K/V, P, the QKV input) move the router's logits by 2-5e-2 (bench/RESULTS.md, router_precision.py) and
// change the routing of tokens whose 4th and 5th experts are that close; fp32 removes those errors.
//
// Every token of the plan is served (padding tokens are skipped): steps with prefill tokens by CTAs of 8
// neighbouring rows sharing their staged keys, decode-only steps by one CTA per token and KV head whose warps
// score the window's keys together. Grids depend only on the token count, so a decode step stays
// graph-capturable. Cost grows with the
// keys per query: meant for sliding-window layers (128 keys); the backend runs no full-attention layer here.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/attention/attention_plan.h"

namespace orchid::kernels::attention {

struct PreciseAttentionArgs {
  const float* q = nullptr;       // token t, head h at q[t * q_stride + h * 64] (roped)
  int q_stride = 0;               // elements between token rows (0: Hq * 64)
  const float* k_pool = nullptr;  // fp32 pools, kv_layout.h's indexing
  const float* v_pool = nullptr;
  const int32_t* page_table = nullptr;
  TableKind table_kind = kFullTable;
  int page_size = 16;            // power of two
  const float* sinks = nullptr;  // [Hq] raw sink logits, or null
  int window = 0;                // keys per query including itself; 0 = full
  float softmax_scale = 0.125f;
  __nv_bfloat16* out_hi = nullptr;  // [num_tokens, Hq * 64]
  __nv_bfloat16* out_lo = nullptr;  // [num_tokens, Hq * 64]
};

// Every token of the plan (plan.num_tokens rows). Hq / Hkv <= 64.
void precise_sink_attention(const PreciseAttentionArgs& args, const AttentionPlan& plan, cudaStream_t stream);

}  // namespace orchid::kernels::attention
