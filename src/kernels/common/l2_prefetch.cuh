// Device side of L2Prefetch (l2_prefetch.h): bulk prefetches into L2 (cp.async.bulk.prefetch, sm_90), one
// instruction per 512 KB piece, which returns at once: the fetch runs in the memory system while the issuing
// kernel goes on. The range is trimmed to whole 16-byte units (the instruction's alignment), so any pointer
// and length are safe.
//
// One thread issues them all. The instruction takes its address and size in uniform registers (SASS
// UBLKPF), so lanes of a warp with different ranges are issued one after another anyway (a loop over the
// distinct values, ~10 instructions each); and the size field holds 16-byte units in 16 bits, so a piece is
// at most 1 MB less 16 bytes. 512 KB pieces: ~60 instructions for a 29.5 MB QKV projection.
#pragma once

#include <cstdint>

#include "kernels/common/l2_prefetch.h"

namespace orchid::kernels {

__device__ __forceinline__ void l2_prefetch(const L2Prefetch& p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr uint64_t kPiece = 512 << 10;
  if (p.ptr == nullptr) return;
  const uint64_t begin = (reinterpret_cast<uint64_t>(p.ptr) + 15) & ~uint64_t(15);
  const uint64_t end = (reinterpret_cast<uint64_t>(p.ptr) + p.bytes) & ~uint64_t(15);
  for (uint64_t a = begin; a < end; a += kPiece) {
    const uint32_t n = uint32_t(end - a < kPiece ? end - a : kPiece);
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(a), "r"(n) : "memory");
  }
#endif
}

// What a kernel carrying an L2Prefetch calls at its start: the grid's first thread issues the whole range
// (weights are never written by the step, so before its griddepcontrol.wait).
__device__ __forceinline__ void l2_prefetch_by_first_thread(const L2Prefetch& p) {
  if (blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0 && threadIdx.x == 0 && threadIdx.y == 0)
    l2_prefetch(p);
}

}  // namespace orchid::kernels
