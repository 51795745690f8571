// Device side of L2Prefetch (l2_prefetch.h): bulk prefetches into L2 (cp.async.bulk.prefetch, sm_90), one
// instruction per 512 KB piece, which returns at once: the fetch runs in the memory system while the issuing
// kernel goes on. The range is trimmed to whole 16-byte units (the instruction's alignment), so any pointer
// and length are safe.
//
// One thread of a CTA issues its pieces. The instruction takes its address and size in uniform registers
// (SASS UBLKPF), so lanes of a warp with different ranges are issued one after another anyway (a loop over
// the distinct values, ~10 instructions each); and the size field holds 16-byte units in 16 bits, so a
// piece is at most 1 MB less 16 bytes.
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

// What a kernel carrying an L2Prefetch calls at its start (weights are never written by the step, so before
// its griddepcontrol.wait): thread 0 of each CTA issues its CTA's slice of the range. One SM's bulk-copy unit
// walking the whole range (~30 MB) kept the next kernel's CTA on that SM waiting behind it: issued from
// the grid's first thread alone, the prefetch made a one-token decode step 2.6x slower (RESULTS
// 2026-12-05, fourth run). A kernel of one or a few CTAs still puts it all on one or a few SMs.
__device__ __forceinline__ void l2_prefetch_by_each_cta(const L2Prefetch& p) {
  if (threadIdx.x != 0 || threadIdx.y != 0 || p.ptr == nullptr) return;
  const uint64_t parts = uint64_t(gridDim.x) * gridDim.y * gridDim.z;
  const uint64_t part = blockIdx.x + uint64_t(gridDim.x) * (blockIdx.y + uint64_t(gridDim.y) * blockIdx.z);
  const uint64_t slice = ((p.bytes + parts - 1) / parts + 15) & ~uint64_t(15);
  const uint64_t begin = part * slice;
  if (begin >= p.bytes) return;
  const uint64_t bytes = p.bytes - begin < slice ? p.bytes - begin : slice;
  l2_prefetch({static_cast<const uint8_t*>(p.ptr) + begin, size_t(bytes)});
}

}  // namespace orchid::kernels
