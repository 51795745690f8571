// Warp-level tensor-core and async-copy primitives used by the attention kernels (PTX available on sm_80+,
// run here on sm_90a): cp.async 16-byte copies with zero-fill, ldmatrix (plain and transposed), and
// mma.sync m16n8k16 bf16 x bf16 (or f16 x f16) -> fp32; the widening of an FP8 (e4m3) KV cache's rows.
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

// c += a * b (m16n8k16, f16 inputs, fp32 accumulators): the FP8 KV cache's path, where e4m3 widens to f16
// exactly in one instruction (f16 holds every e4m3 value; bf16 would need several).
__device__ __forceinline__ void mma_f16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The MMA of a kernel's element type: bf16 (a BF16 KV cache) or f16 (an FP8 one).
template <bool kF16>
__device__ __forceinline__ void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (kF16)
    mma_f16(c, a, b0, b1);
  else
    mma_bf16(c, a, b0, b1);
}

// Two floats -> packed f16x2 (round to nearest even), `lo` in the low half; softmax probabilities only
// (in [0, 1], where f16 is 8x finer than bf16).
__device__ __forceinline__ uint32_t pack_f16(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

// A bf16x2 word as f16x2: exact for magnitudes in [2^-14, 65504] (bf16's 8 significant bits fit in f16's
// 11); larger ones saturate to +-65504 (a query row that large has no meaningful softmax anyway), smaller
// ones round into f16's subnormals. NaN stays NaN.
__device__ __forceinline__ uint32_t bf16x2_to_f16x2(uint32_t v) {
  uint32_t r;
  asm("cvt.rn.satfinite.f16x2.f32 %0, %1, %2;\n"
      : "=r"(r)
      : "f"(__uint_as_float(v & 0xffff0000u)), "f"(__uint_as_float(v << 16)));
  return r;
}

// Four e4m3 bytes (byte i = element i) -> f16x2 words lo (elements 0, 1) and hi (elements 2, 3), exactly.
__device__ __forceinline__ void e4m3x4_to_f16x4(uint32_t v, uint32_t& lo, uint32_t& hi) {
  asm("{\n .reg .b16 l, h;\n mov.b32 {l, h}, %2;\n cvt.rn.f16x2.e4m3x2 %0, l;\n cvt.rn.f16x2.e4m3x2 %1, "
      "h;\n}\n"
      : "=r"(lo), "=r"(hi)
      : "r"(v));
}

// Byte offset of (row, 16-byte chunk) in a swizzled [rows][64] e4m3 tile (64-byte rows, two a 128-byte
// line): chunk c of row r lives at chunk c ^ ((r / 2) % 4), so the 16-byte reads of 8 consecutive rows at one
// chunk, and the 16-byte cp.async writes, hit 8 different bank groups.
__device__ __forceinline__ uint32_t swz8(int row, int chunk) {
  return uint32_t(row * 64 + ((chunk ^ ((row >> 1) & 3)) << 4));
}

// Rows [row0, row0 + rows) of a swizzled e4m3 tile (swz8) widened into the same rows of a swizzled f16 tile
// (swz), by `threads` threads of which this is `thread` (16 e4m3 -> two 16-byte f16 chunks per item).
template <int kRows, int kThreads>
__device__ __forceinline__ void widen_e4m3_rows(uint32_t src, uint32_t dst, int row0, int thread) {
  static_assert((kRows * 4) % kThreads == 0, "whole items per thread");
#pragma unroll
  for (int i = 0; i < kRows * 4 / kThreads; ++i) {
    const int item = thread + i * kThreads;
    const int r = row0 + (item >> 2), c = item & 3;
    uint32_t w[4];
    asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3])
                 : "r"(src + swz8(r, c))
                 : "memory");
    uint32_t h[8];
#pragma unroll
    for (int k = 0; k < 4; ++k) e4m3x4_to_f16x4(w[k], h[2 * k], h[2 * k + 1]);
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(dst + swz(r, 2 * c)), "r"(h[0]),
                 "r"(h[1]), "r"(h[2]), "r"(h[3])
                 : "memory");
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(dst + swz(r, 2 * c + 1)), "r"(h[4]),
                 "r"(h[5]), "r"(h[6]), "r"(h[7])
                 : "memory");
  }
}

// MMA fragments straight from swizzled e4m3 tiles (swz8), no f16 copy in shared memory: the decode kernel's
// FP8 KV path. Both rely on a sum's freedom of order.
//
// K as the B operand of S = Q K^T (k = head dims, n = keys): a thread (g, t) of the warp needs, for key g of
// an 8-key block, two dims of every 16-dim k-step. The dims are permuted alike in Q and K (a dot product does
// not see the order): k-step ks's columns 2t, 2t+1 are dims 16t + 4ks + {0, 1} and columns 2t+8, 2t+9 are
// 16t + 4ks + {2, 3}, so one 16-byte read of row g at byte 16t gives the thread all four k-steps: b[ks][0]
// and b[ks][1] are the low and high halves of its word ks, widened. q_frag_permuted reads Q's A fragments
// in the same order.
__device__ __forceinline__ void k_frags_e4m3(const uint8_t* tile, int row, int lane, uint32_t (&b)[4][2]) {
  const uint4 w = *reinterpret_cast<const uint4*>(tile + swz8(row, lane & 3));
  e4m3x4_to_f16x4(w.x, b[0][0], b[0][1]);
  e4m3x4_to_f16x4(w.y, b[1][0], b[1][1]);
  e4m3x4_to_f16x4(w.z, b[2][0], b[2][1]);
  e4m3x4_to_f16x4(w.w, b[3][0], b[3][1]);
}

// Q's A fragments of one m16 tile in k_frags_e4m3's dim order, from a swizzled f16 tile (swz): the thread's
// rows g and g+8, dims 16t .. 16t+15 (chunks 2t and 2t+1), a[ks] = {row g dims 16t+4ks+{0,1}, row g+8 the
// same, row g dims 16t+4ks+{2,3}, row g+8 the same}.
__device__ __forceinline__ void q_frag_permuted(const uint8_t* tile, int row0, int lane,
                                                uint32_t (&a)[4][4]) {
  const int g = lane >> 2, t = lane & 3;
  const uint4 lo0 = *reinterpret_cast<const uint4*>(tile + swz(row0 + g, 2 * t));
  const uint4 hi0 = *reinterpret_cast<const uint4*>(tile + swz(row0 + g, 2 * t + 1));
  const uint4 lo1 = *reinterpret_cast<const uint4*>(tile + swz(row0 + g + 8, 2 * t));
  const uint4 hi1 = *reinterpret_cast<const uint4*>(tile + swz(row0 + g + 8, 2 * t + 1));
  a[0][0] = lo0.x, a[0][1] = lo1.x, a[0][2] = lo0.y, a[0][3] = lo1.y;
  a[1][0] = lo0.z, a[1][1] = lo1.z, a[1][2] = lo0.w, a[1][3] = lo1.w;
  a[2][0] = hi0.x, a[2][1] = hi1.x, a[2][2] = hi0.y, a[2][3] = hi1.y;
  a[3][0] = hi0.z, a[3][1] = hi1.z, a[3][2] = hi0.w, a[3][3] = hi1.w;
}

// V as the B operand of O = P V (k = keys, n = head dims) for the 8 keys row0 + 2t + {0, 1} (b0) of a
// 16-key step: the output dims are permuted, n-block dt's column g being dim 8g + dt, so the thread reads
// 8 bytes (dims 8g .. 8g+7) of each of its two keys and pairs their bytes (byte_perm) into f16x2 words:
// b[dt] = {key 2t, key 2t+1} at dim 8g + dt. The thread's accumulator o[dt][e] then holds dim
// 8 (2t + e) + dt. Odd t read their two rows in the other order, which puts the 8-byte reads of a
// half-warp on 32 different banks (swz8's rows pair up in 128-byte lines).
__device__ __forceinline__ void v_frags_e4m3(const uint8_t* tile, int row0, int lane, uint32_t (&b)[8]) {
  const int g = lane >> 2, t = lane & 3, odd = t & 1;
  const uint32_t col = (g & 1) * 8;
  const uint2 x = *reinterpret_cast<const uint2*>(tile + swz8(row0 + 2 * t + odd, g >> 1) + col);
  const uint2 y = *reinterpret_cast<const uint2*>(tile + swz8(row0 + 2 * t + 1 - odd, g >> 1) + col);
  // (key 2t byte i, key 2t+1 byte i, key 2t byte i+1, key 2t+1 byte i+1) for i = 0 and 2 of a word, with
  // x's bytes numbered 0-3 and y's 4-7.
  const uint32_t sel01 = odd ? 0x1504u : 0x5140u, sel23 = odd ? 0x3726u : 0x7362u;
  const uint32_t p[4] = {__byte_perm(x.x, y.x, sel01), __byte_perm(x.x, y.x, sel23),
                         __byte_perm(x.y, y.y, sel01), __byte_perm(x.y, y.y, sel23)};
#pragma unroll
  for (int i = 0; i < 4; ++i) e4m3x4_to_f16x4(p[i], b[2 * i], b[2 * i + 1]);
}

// Two floats -> packed bf16x2 (round to nearest even), `lo` in the low half (the lower column index).
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

// Softmax probabilities packed for the PV product in the kernel's element type.
template <bool kF16>
__device__ __forceinline__ uint32_t pack_16(float lo, float hi) {
  if constexpr (kF16)
    return pack_f16(lo, hi);
  else
    return pack_bf16(lo, hi);
}

__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}
// 1 / x by MUFU alone (flushing denormals; __fdividef adds a range check around it).
__device__ __forceinline__ float fast_rcp(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace orchid::kernels::attention::detail
