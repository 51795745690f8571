// Warp-level tensor-core and async-copy primitives used by the attention kernels (PTX available on sm_80+,
// run here on sm_90a): cp.async 16-byte copies with zero-fill, ldmatrix (plain and transposed), and
// mma.sync m16n8k16 bf16 x bf16 -> fp32.
//
// Fragment layouts of mma.m16n8k16 (g = lane / 4, t = lane % 4), which every caller relies on:
//   A (16x16, row-major)  a0: (g, 2t..2t+1)  a1: (g+8, 2t..)  a2: (g, 2t+8..)  a3: (g+8, 2t+8..)
//   B (16x8,  "col")      b0: (k 2t..2t+1, n g)  b1: (k 2t+8.., n g)
//   C (16x8,  fp32)       c0,c1: (g, 2t..2t+1)  c2,c3: (g+8, 2t..2t+1)
// ldmatrix.x4: lane i supplies the address of row (i % 8) of matrix (i / 8); register j receives matrix j
// with lane holding (row g, columns 2t, 2t+1); with .trans, (rows 2t, 2t+1, column g).
//
// Shared tiles of 64 bf16 per row (128 bytes = 8 chunks of 16 bytes) are swizzled: logical chunk c of row r
// lives at chunk c ^ (r % 8). ldmatrix reads 8 consecutive rows at one logical chunk, which the swizzle
// spreads over all 8 chunk positions (32 banks), and 16-byte cp.async writes stay conflict-free.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/common/mma_sync.cuh"

namespace orchid::kernels::attention::detail {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Byte offset of (row, 16-byte chunk) in a swizzled [rows][64] bf16 tile.
__device__ __forceinline__ uint32_t swz(int row, int chunk) {
  return uint32_t(row * 128 + ((chunk ^ (row & 7)) << 4));
}

// 16-byte global -> shared copy. When !valid nothing is read from `src` and the destination is zero-filled.
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool valid) {
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

using orchid::kernels::ldmatrix_x4;
using orchid::kernels::ldmatrix_x4_trans;

// c += a * b (m16n8k16, bf16 inputs, fp32 accumulators).
__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats -> packed bf16x2 (round to nearest even), `lo` in the low half (the lower column index).
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace orchid::kernels::attention::detail
