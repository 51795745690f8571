// Hopper bulk copies (the TMA unit's 1-D form, and boxes of a tensor map) into shared memory, completed on an
// mbarrier, and boxes of a tensor map from shared memory out to global memory, completed by bulk groups.
// One thread moves kilobytes with one instruction, and the bytes in flight are not bounded by registers or
// by the per-thread load slots: what a weight stream needs to reach HBM bandwidth with one CTA per SM.
//
// Protocol of a ring stage: the producer arms `full` with the bytes it will copy (arrive + expect_tx), issues
// the copies, and the consumers wait on `full`'s phase; they release the stage by arriving on `empty`, which
// the producer waits on before the stage's next fill. Phases alternate parity 0, 1, 0, ...
#pragma once

#include <cstdint>

namespace orchid::kernels {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return uint32_t(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(arrivals) : "memory");
}

// Makes the initialized barriers visible to the async (TMA) proxy; then a __syncthreads() for the threads.
__device__ __forceinline__ void mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

// One arrival that also announces `bytes` of bulk copies to complete this phase.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
}

__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}

// Waits until the phase with this parity has completed.
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "ORCHID_MBAR_WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra ORCHID_MBAR_WAIT_%=;\n"
      "}\n" ::"r"(smem_addr(bar)),
      "r"(parity)
      : "memory");
}

// The same wait for a producer thread that has nothing else to do until the stage frees up: each try may
// suspend the warp until the phase completes (up to kIdleWaitHintNs), where the plain wait returns at once
// and loops. A producer warp spinning on `empty` otherwise takes issue slots from the consumer warps of
// its scheduler: ncu of the sliding-window prefill kernel counted the loop at 6% of every instruction
// issued, all on one of the four schedulers.
inline constexpr uint32_t kIdleWaitHintNs = 1000000;
__device__ __forceinline__ void mbar_wait_idle(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "ORCHID_MBAR_IDLE_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1, %2;\n"
      "@!done bra ORCHID_MBAR_IDLE_%=;\n"
      "}\n" ::"r"(smem_addr(bar)),
      "r"(parity), "n"(kIdleWaitHintNs)
      : "memory");
}

// Copies `bytes` (a multiple of 16; both addresses 16-byte aligned) from global to this CTA's shared memory;
// completion is counted on `bar`.
__device__ __forceinline__ void bulk_copy_g2s(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
          smem_addr(dst)),
      "l"(src), "r"(bytes), "r"(smem_addr(bar))
      : "memory");
}

// One box of a 2-D / 3-D / 4-D tensor map (coordinates innermost first, in elements) into shared memory,
// counted on `bar`. The map must live in parameter, constant or global memory (a __grid_constant__
// parameter).
__device__ __forceinline__ void tensor_copy_2d(void* dst, const void* map, int x, int y, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], "
      "[%4];\n" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(smem_addr(bar))
      : "memory");
}
__device__ __forceinline__ void tensor_copy_3d(void* dst, const void* map, int x, int y, int z,
                                               uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], "
      "[%5];\n" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(z), "r"(smem_addr(bar))
      : "memory");
}

__device__ __forceinline__ void tensor_copy_4d(void* dst, const void* map, int x, int y, int z, int w,
                                               uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, "
      "%5}], [%6];\n" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(z), "r"(w), "r"(smem_addr(bar))
      : "memory");
}

// One box of a 3-D tensor map from this CTA's shared memory to global memory (coordinates innermost first),
// in the issuing thread's current bulk group. The TMA unit reads the box through the async proxy: threads
// that wrote it with ordinary stores fence (fence_proxy_async_smem) and meet the issuing thread at a barrier
// first. Then bulk_commit closes the group, and bulk_wait_read<0> waits until the box has been read (its
// shared memory may be written again).
__device__ __forceinline__ void tensor_store_3d(const void* map, int x, int y, int z, const void* src) {
  asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%1, %2, %3}], [%4];\n" ::"l"(
                   reinterpret_cast<uint64_t>(map)),
               "r"(x), "r"(y), "r"(z), "r"(smem_addr(src))
               : "memory");
}
__device__ __forceinline__ void bulk_commit() {
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}
// Until at most kPending of this thread's bulk groups have their shared sources still to read...
template <int kPending>
__device__ __forceinline__ void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(kPending) : "memory");
}
// ... or still to complete (their global writes done).
template <int kPending>
__device__ __forceinline__ void bulk_wait() {
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(kPending) : "memory");
}

}  // namespace orchid::kernels
