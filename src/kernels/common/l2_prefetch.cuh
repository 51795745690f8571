// Device side of L2Prefetch (l2_prefetch.h): bulk prefetches into L2 (cp.async.bulk.prefetch, sm_90), one
// instruction per 64 KB piece, which returns at once: the fetch runs in the memory system while the issuing
// kernel goes on. The range is trimmed to whole 16-byte units (the instruction's alignment), so any pointer
// and length are safe.
#pragma once

#include <cstdint>

#include "kernels/common/l2_prefetch.h"

namespace orchid::kernels {

// Called by `lanes` threads (lane = 0 .. lanes-1), each issuing every lanes-th piece.
__device__ __forceinline__ void l2_prefetch(const L2Prefetch& p, int lane, int lanes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr uint64_t kPiece = 64 << 10;
  if (p.ptr == nullptr) return;
  const uint64_t begin = (reinterpret_cast<uint64_t>(p.ptr) + 15) & ~uint64_t(15);
  const uint64_t end = (reinterpret_cast<uint64_t>(p.ptr) + p.bytes) & ~uint64_t(15);
  for (uint64_t a = begin + uint64_t(lane) * kPiece; a < end; a += uint64_t(lanes) * kPiece) {
    const uint32_t n = uint32_t(end - a < kPiece ? end - a : kPiece);
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(a), "r"(n) : "memory");
  }
#endif
}

// The whole range, issued by the first warp of the grid's first block (the other threads do nothing): what a
// kernel carrying an L2Prefetch calls at its start (weights are never written by the step, so before its
// griddepcontrol.wait).
__device__ __forceinline__ void l2_prefetch_by_first_warp(const L2Prefetch& p) {
  if (blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0 && threadIdx.x < 32 && threadIdx.y == 0)
    l2_prefetch(p, int(threadIdx.x), 32);
}

}  // namespace orchid::kernels
