// Kernels of an EAGLE-3 draft head on the GPU (runtime/cuda/cuda_eagle3.h runs them; model/eagle3.h has the
// math), around the GEMMs (dense_gemm.h) and the attention (sink_attention.h, without sinks) that the head
// shares with the target: plain RoPE with the K/V write into the head's own paged pool, the Llama MLP's
// silu(gate) * up, and the moves around them. The head is one layer over a few rows a step, so these are
// plain elementwise kernels, one pass over their bytes.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace orchid::kernels::eagle3 {

inline constexpr int kHeadDim = 64;  // the only head width these kernels take

// One query row of the head: its position and where its sequence's page table starts.
struct HeadRow {
  int32_t pos = 0;
  int32_t table_begin = 0;
};

struct RopeFreqs {
  float inv_freq[kHeadDim / 2];
  float concentration;
};

// The head's K/V: pools [pages][kv_heads][page_size][64] bf16 (the target's full-layer layout,
// kv_layout.h) addressed through `page_table`.
struct HeadKv {
  __nv_bfloat16 *k_pool = nullptr, *v_pool = nullptr;
  const int32_t* page_table = nullptr;
  int32_t page_size = 16;
  int32_t num_pages = 0;
  int32_t num_q_heads = 0, num_kv_heads = 0;
};

// qkv [rows, (Hq + 2 Hkv) * 64] bf16 (q, then k, then v heads): q rotated into q_out [rows, Hq * 64], k
// rotated and v written at each row's position (a row whose page is missing or outside the pool writes no
// K/V). Half-split rotation as model/rope.h says.
void rope_kv_write(const __nv_bfloat16* qkv, const HeadRow* rows, int64_t num_rows, const RopeFreqs& freqs,
                   const HeadKv& kv, __nv_bfloat16* q_out, cudaStream_t stream);

// act[r, i] = silu(gu[r, i]) * gu[r, inter + i] (gate columns, then up columns), bf16.
void silu_mul(const __nv_bfloat16* gu, int64_t rows, int64_t inter, __nv_bfloat16* act, cudaStream_t stream);

// dst[t, col0 + c] = bf16(src[t, c]) for c < cols; dst rows are ld_dst elements apart.
void f32_to_bf16_cols(const float* src, int64_t rows, int64_t cols, __nv_bfloat16* dst, int64_t ld_dst,
                      int64_t col0, cudaStream_t stream);

// Draft ids to target ids: tokens[r] = d2t[ids[r]] and proposals[r * stride + column] = the same.
void map_draft_ids(const int32_t* ids, const int32_t* d2t, int64_t rows, int32_t* tokens, int32_t* proposals,
                   int64_t stride, int64_t column, cudaStream_t stream);

}  // namespace orchid::kernels::eagle3
