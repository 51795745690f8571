// Paged KV cache layout shared by the RoPE/KV-write kernel, the attention kernels and their CPU references.
//
// Per layer there is one K pool and one V pool, each
//     bf16 pool[num_pages][num_kv_heads][page_size][64]          ("HND": head-major inside a page)
// Element (page, kv head h, slot s, dim d) is at ((page * Hkv + h) * page_size + s) * 64 + d.
// A sequence's logical page k holds positions [k * page_size, (k + 1) * page_size); its page table row maps
// k to a page id (int32). Page tables are one flat int32 array with a row offset per sequence; full-attention
// and sliding-window layers use separate pools and separate tables, and a sliding table may hold kNoPage (-1)
// for pages whose positions all left the window: kernels never dereference those. Contract for the engine:
// a sliding table row must hold real pages for every position >= (first new token's position - window + 1),
// since the step's first query reads back that far; attention zero-fills (never reads) anything older.
//
// Why head-major inside a page: an attention CTA serves one KV head, so its K (or V) rows of one page are one
// contiguous run of page_size * 128 bytes (2/4/8 KB for pages of 16/32/64 tokens): every 16-byte cp.async
// of a 64-key tile hits full 128-byte lines and a page is one contiguous block per head (simple to move
// with a bulk copy later). The KV write side (one token, all heads) then writes 128-byte rows at a stride of
// page_size * 128 bytes, still whole lines. K and V live in two pools so that a layer's K (or V) tile of a
// page is dense, and so that the runtime may place them in one allocation or two.
// page_size is a run-time power of two (16, 32, 64, ... ); kernels take its log2.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/host_device.h"

namespace orchid::kernels::attention {

inline constexpr int kHeadDim = 64;
inline constexpr int32_t kNoPage = -1;

// Offset in elements of (page, head, slot) in a K or V pool.
ORCHID_HOST_DEVICE inline size_t kv_offset(int32_t page, int head, int slot, int num_kv_heads,
                                           int page_size_log2) {
  return ((size_t(page) * size_t(num_kv_heads) + size_t(head)) << page_size_log2 | size_t(slot)) *
         size_t(kHeadDim);
}

inline size_t kv_pool_elements(int64_t num_pages, int num_kv_heads, int page_size) {
  return size_t(num_pages) * size_t(num_kv_heads) * size_t(page_size) * kHeadDim;
}

// log2 of a power of two >= 1, or -1 when it is not one.
inline int log2_exact(int64_t v) {
  if (v <= 0 || (v & (v - 1)) != 0) return -1;
  int l = 0;
  while ((int64_t(1) << l) < v) ++l;
  return l;
}

}  // namespace orchid::kernels::attention
