// Hopper warpgroup MMA (wgmma, sm_90a) primitives shared by the kernels that use it (prefill attention, the
// W4A8 MXFP4 expert GEMM): the shared-memory matrix descriptor, the fences and the commit / wait of the
// asynchronous MMAs.
//
// Descriptor (PTX "matrix descriptor"): start address >> 4 in bits 0-13, leading byte offset >> 4 in 16-29
// (between core matrices adjacent in K), stride byte offset >> 4 in 32-45 (between core matrices adjacent in
// M / N), layout type in 62-63 (0 = no swizzle: each core matrix is 8 rows of 16 contiguous bytes; 1 =
// 128-byte swizzle).
#pragma once

#include <cstdint>

namespace orchid::kernels {

__device__ __forceinline__ uint64_t wgmma_desc(uint32_t smem_byte_addr, uint32_t lbo_bytes,
                                               uint32_t sbo_bytes, uint32_t layout_type) {
  uint64_t d = 0;
  d |= uint64_t((smem_byte_addr >> 4) & 0x3fff);
  d |= uint64_t((lbo_bytes >> 4) & 0x3fff) << 16;
  d |= uint64_t((sbo_bytes >> 4) & 0x3fff) << 32;
  d |= uint64_t(layout_type) << 62;
  return d;
}

__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
// Orders ordinary shared-memory writes (cp.async, st.shared) before reads by the async proxy (wgmma).
__device__ __forceinline__ void fence_proxy_async_smem() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// Keeps the compiler from moving accesses of wgmma operand registers across the asynchronous MMA.
template <int N>
__device__ __forceinline__ void fence_operands(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}

}  // namespace orchid::kernels
