// Parameters shared by the two prefill kernels (mma.sync and Hopper); internal to the attention launchers.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/attention/attention_plan.h"
#include "kernels/common/fast_divmod.h"

namespace orchid::kernels::attention::detail {

struct PrefillParams {
  const __nv_bfloat16* q;
  const void* k_pool;  // bf16, or e4m3 (the mma.sync kernel's FP8 variant)
  const void* v_pool;
  const float* k_scale;  // [Hkv] or null (1.0): FP8 pools only
  const float* v_scale;
  const int32_t* page_table;
  const float* sinks;
  __nv_bfloat16* out;
  const AttnSeq* seqs;
  const PrefillTile* tiles;
  int table_kind;
  int num_q_heads;
  int num_kv_heads;
  int group;
  int tokens_per_tile;
  int page_size_log2;
  int window;
  float scale_log2;  // softmax scale * log2(e)
  // Split keys (the Hopper kernel, full attention): the launch's work records instead of `tiles`, and where
  // pieces put their partial results (prefill_partial_floats(tokens_per_tile * group) a slot and KV head).
  const PrefillPiece* pieces = nullptr;
  float* partial = nullptr;
  FastDivmod kv_heads;  // num_kv_heads (the Hopper kernel's item -> tile, KV head)
};

// The Hopper kernel (prefill_attention_sm90.cu). Consumer warpgroups of the Hopper kernel for a plan's tile
// shape (2 for 128-row tiles, 3 for 192), 0 when the shape is neither.
int hopper_prefill_consumers(int group, int tokens_per_tile);
// q is [num_token_rows][Hq][64], each pool num_pages pages. `items` = tiles x KV heads, validated by the
// caller, as is page_size >= 8; `ctas` > 0: that many persistent CTAs (0: prefill_attention_sm90.cu's rule);
// `tma_store`: SinkAttentionArgs::prefill_tma_store.
void launch_prefill_hopper(const PrefillParams& p, int num_token_rows, int64_t num_pages, unsigned items,
                           int ctas, int tma_store, cudaStream_t stream);

// Adds up the pieces of the plan's `num_split_tiles` split tiles (split_tiles: each one's first record in
// p.pieces) from p.partial and writes their rows of p.out.
void launch_prefill_merge(const PrefillParams& p, const int32_t* split_tiles, int num_split_tiles,
                          cudaStream_t stream);

}  // namespace orchid::kernels::attention::detail
