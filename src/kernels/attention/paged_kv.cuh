// How every attention kernel reads the paged KV cache (kv_layout.h) and its query rows: one sequence's view
// of a layer's page table for the CTA's KV head (which page holds a key, where its row lies in a pool), the
// cp.async loads of a 64-key K/V tile (BF16 rows of 128 bytes, or e4m3 rows of 64: the FP8 cache) that the
// decode and mma.sync prefill kernels share, and the CTA's query rows. The Hopper prefill kernel copies
// pages with TMA and takes their row coordinates from here too, so a change of layout or precision is made
// in this one place.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/attention/attention_plan.h"
#include "kernels/attention/kv_layout.h"
#include "kernels/attention/warp_mma.cuh"

namespace orchid::kernels::attention::detail {

struct PagedKv {
  const int32_t* table;  // the sequence's row of this layer's page table
  int page_size_log2;
  int num_kv_heads;
  int kv_head;

  __device__ __forceinline__ static PagedKv of(const AttnSeq* seqs, int seq, const int32_t* page_table,
                                               int table_kind, int page_size_log2, int num_kv_heads,
                                               int kv_head) {
    return {page_table + (&seqs[seq].table_begin[0])[table_kind], page_size_log2, num_kv_heads, kv_head};
  }
  // The page of key position t, read only when t is in [begin, end): kNoPage outside.
  __device__ __forceinline__ int32_t page_of(int t, int begin, int end) const {
    return t >= begin && t < end ? table[t >> page_size_log2] : kNoPage;
  }
  // The element offset of key position t's row in a pool, its page given (kv_layout.h's kv_offset).
  __device__ __forceinline__ size_t offset(int32_t page, int t) const {
    return kv_offset(page, kv_head, t & ((1 << page_size_log2) - 1), num_kv_heads, page_size_log2);
  }
  // The same as a row index (rows of 64 elements): a TMA box's row coordinate.
  __device__ __forceinline__ int row(int32_t page, int t) const {
    return ((page * num_kv_heads + kv_head) << page_size_log2) + (t & ((1 << page_size_log2) - 1));
  }
};

// Keys j * 64 .. j * 64 + 63 of K and V into swizzled shared tiles (swz for BF16 rows, swz8 for e4m3 ones)
// by kThreads threads (this one `tid`), 16-byte cp.async each; keys outside [begin, end) or in kNoPage pages
// are zero-filled, never read, so stale or poisoned cache memory cannot reach the accumulators.
template <int kElemBytes, int kThreads>
__device__ __forceinline__ void load_kv_tile(uint32_t k_dst, uint32_t v_dst, const void* k_pool,
                                             const void* v_pool, const PagedKv& kv, int j, int begin, int end,
                                             int tid) {
  constexpr int kBlockN = 64;
  constexpr int kChunks = kHeadDim * kElemBytes / 16;  // 16-byte chunks a row
  constexpr int kRowsPerPass = kThreads / kChunks;
  static_assert(kBlockN % kRowsPerPass == 0, "whole passes");
  const uint8_t* k = static_cast<const uint8_t*>(k_pool);
  const uint8_t* v = static_cast<const uint8_t*>(v_pool);
  const int chunk = tid % kChunks;
#pragma unroll
  for (int i = 0; i < kBlockN / kRowsPerPass; ++i) {
    const int r = tid / kChunks + kRowsPerPass * i;
    const int t = j * kBlockN + r;
    const int32_t page = kv.page_of(t, begin, end);
    const bool valid = page >= 0;
    const size_t off = valid ? kv.offset(page, t) * kElemBytes + size_t(chunk) * 16 : 0;
    const uint32_t at = kElemBytes == 1 ? swz8(r, chunk) : swz(r, chunk);
    cp_async_16(k_dst + at, k + off, valid);
    cp_async_16(v_dst + at, v + off, valid);
  }
}

// kRows query rows into a swizzled [kRows][64] bf16 tile by kThreads threads: row r is token tok0 + r / G,
// head head0 + r % G of q [tokens][Hq][64]; rows from `rows` on are zero (cp.async, one per 16-byte chunk).
template <int kRows, int kThreads>
__device__ __forceinline__ void load_q_rows(uint32_t dst, const __nv_bfloat16* q, size_t tok0,
                                            int num_q_heads, int head0, int G, int rows, int tid) {
  for (int i = tid; i < kRows * 8; i += kThreads) {
    const int r = i >> 3, chunk = i & 7;
    const bool valid = r < rows;
    const int t = r / G;
    const __nv_bfloat16* src =
        valid ? q + ((tok0 + size_t(t)) * num_q_heads + head0 + (r - t * G)) * kHeadDim + chunk * 8 : q;
    cp_async_16(dst + swz(r, chunk), src, valid);
  }
}

// The same rows by plain loads and shared-memory stores, into the tile at `dst` (generic address of the
// shared tile): no cp.async group, the caller's next barrier publishes them. kToF16: converted from bf16 to
// f16 on the way (the FP8-cache decode's queries).
template <int kRows, int kThreads, bool kToF16>
__device__ __forceinline__ void load_q_rows_now(uint8_t* dst, const __nv_bfloat16* q, size_t tok0,
                                                int num_q_heads, int head0, int G, int rows, int tid) {
  for (int i = tid; i < kRows * 8; i += kThreads) {
    const int r = i >> 3, chunk = i & 7;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (r < rows) {
      const int t = r / G;
      v = *reinterpret_cast<const uint4*>(
          q + ((tok0 + size_t(t)) * num_q_heads + head0 + (r - t * G)) * kHeadDim + chunk * 8);
      if constexpr (kToF16) {
        v.x = bf16x2_to_f16x2(v.x), v.y = bf16x2_to_f16x2(v.y), v.z = bf16x2_to_f16x2(v.z);
        v.w = bf16x2_to_f16x2(v.w);
      }
    }
    *reinterpret_cast<uint4*>(dst + swz(r, chunk)) = v;
  }
}

}  // namespace orchid::kernels::attention::detail
