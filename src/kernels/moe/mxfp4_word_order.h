// A storage order for the bits of each 32-bit word of MXFP4 expert blocks (8 e2m1 nibbles, element i at bits
// 4i..4i+3) in which the tiled GEMM's bf16 placement costs 9 operations a word instead of 16. The expert
// blocks take it at load with ORCHID_MXFP4_WORD_ORDER=tiled (mxfp4_to_tiled_order, weight_convert.h); the
// kernels that read them then decode it: the tiled GEMM (pair_to_bf16x2), the streaming GEMM (pair_to_f16x2,
// 17 operations a word instead of 16) and the MXFP4 -> FP8 conversion (to_original_order, ~25 operations a
// word in a kernel bound by memory).
//
// The placement of pair I (elements I and I + 4) into a bf16x2 (mxfp4_mma.cuh, e2m1_pair_place<I, 6>) needs
// the pair's 8 bits at T = {6, 7, 8, 15, 22, 23, 24, 31}: magnitude (e1 e0 m) of the low element at 6..8, its
// sign at 15, the high element's at 22..24 and 31. No order makes all four pairs a rotation and a mask (no
// four translates of T tile 32 bits), but three can: pair 0 is stored at T, pair 1 at T + 4, pair 2 at
// T + 10 (mod 32), and pair 3 in the 8 bits left, {4, 5, 13, 14, 20, 21, 29, 30}, which two rotations bring
// to T. Decoding: R0 = w & T, R1 = rotr(w, 4) & T, R2 = rotr(w, 10) & T,
// R3 = (rotl(w, 2) & 0x80c080c0) | (rotl(w, 10) & 0x01000100).
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define ORCHID_MXFP4_HD __host__ __device__ __forceinline__
#else
#define ORCHID_MXFP4_HD inline
#endif

namespace orchid::kernels::mxfp4_order {

inline constexpr uint32_t kPairMask = 0x81c081c0u;  // T

// Stored bit p holds the original word's bit stored_from(p) (a table local to a constexpr function, so
// that host and device code share it).
ORCHID_MXFP4_HD constexpr int stored_from(int p) {
  constexpr int kFrom[32] = {24, 25, 26, 23, 12, 13, 0,  1,  2,  27, 4,  5,  6,  15, 30, 3,
                             8,  9,  10, 7,  28, 29, 16, 17, 18, 11, 20, 21, 22, 31, 14, 19};
  return kFrom[p];
}

// The stored form of an original word (a load-time repack: one pass over the expert blocks).
ORCHID_MXFP4_HD uint32_t to_tiled_order(uint32_t w) {
  uint32_t s = 0;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int p = 0; p < 32; ++p) s |= ((w >> stored_from(p)) & 1u) << p;
  return s;
}

// Its inverse, bit by bit (the reference for to_original_order below).
ORCHID_MXFP4_HD uint32_t from_tiled_order(uint32_t s) {
  uint32_t w = 0;
  for (int p = 0; p < 32; ++p) w |= ((s >> p) & 1u) << stored_from(p);
  return w;
}

ORCHID_MXFP4_HD uint32_t rotr(uint32_t x, int n) {
#if defined(__CUDA_ARCH__)
  return __funnelshift_r(x, x, n);
#else
  return (x >> n) | (x << ((32 - n) & 31));
#endif
}

// Pair I of a stored word placed as bf16x2 (e2m1 * 2^-126 in each half, the sign at bit 15 / 31): equal to
// e2m1_pair_place<I, 6>(from_tiled_order(s)).
template <int I>
ORCHID_MXFP4_HD uint32_t pair_to_bf16x2(uint32_t s) {
  static_assert(I >= 0 && I < 4, "four pairs a word");
  if constexpr (I == 0) return s & kPairMask;
  if constexpr (I == 1) return rotr(s, 4) & kPairMask;
  if constexpr (I == 2) return rotr(s, 10) & kPairMask;
  return (rotr(s, 30) & 0x80c080c0u) | (rotr(s, 22) & 0x01000100u);  // rotl by 2 and by 10
}

// Pair I of a stored word placed as f16x2 (e2m1 * 2^-14: (e1 e0 m) at bits 9..11 / 25..27, the sign at 15 /
// 31), the streaming GEMM's placement of the original word: the bf16 placement with its magnitude bits moved
// up by 3 (one shift and one bit select: bit 18 of the shifted word, the sign's image, is dropped).
template <int I>
ORCHID_MXFP4_HD uint32_t pair_to_f16x2(uint32_t s) {
  constexpr uint32_t kKeep = 0x80048000u;  // from r: the signs (and bit 18, which r never has)
  const uint32_t r = pair_to_bf16x2<I>(s);
  return (r & kKeep) | ((r << 3) & ~kKeep);
}

// The original word of a stored one (the conversion to FP8 reads nibbles in order): pair I's placement
// holds element I's magnitude at 6..8 and sign at 15, element I + 4's at 22..24 and 31, each moved to its
// nibble.
ORCHID_MXFP4_HD uint32_t to_original_order(uint32_t s) {
  auto shr = [](uint32_t x, int n) { return n >= 0 ? x >> n : x << -n; };
  const uint32_t r[4] = {pair_to_bf16x2<0>(s), pair_to_bf16x2<1>(s), pair_to_bf16x2<2>(s),
                         pair_to_bf16x2<3>(s)};
  uint32_t w = 0;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int i = 0; i < 4; ++i)
    w |= (shr(r[i], 6 - 4 * i) & (0x00070007u << (4 * i))) |
         (shr(r[i], 12 - 4 * i) & (0x00080008u << (4 * i)));
  return w;
}

// ---- W4A8: a stored word as eight e4m3 bytes (the FP8 wgmma's A registers) ----
//
// The W4A8 GEMM (mxfp4_w4a8_gemm.h) multiplies e4m3 weights by e4m3 activations. A weight row's MX block
// scale 2^s is folded into the bytes relative to a per-row exponent c (the epilogue multiplies by 2^(c-127)):
// byte = e4m3(e2m1 * 2^d), d = s - c, through an 8-entry table of the magnitudes (two registers, one
// PRMT per four bytes), the sign OR-ed in as bit 7. For d in [-5, 6] the table is two multiply-adds of s
// (e4m3_lut); below, the magnitudes are subnormal or round, and the table is built element by element
// (e4m3_lut_slow: exact down to d = -7, rounded to nearest even below).
//
// In the tiled word order the 3-bit magnitude of element i sits at: 0: 6-8, 1: 10-12, 2: 16-18, 3: {4, 5,
// 30}, 4: 22-24, 5: 26-28, 6: 0-2, 7: {20, 21, 14} (m, e0, e1 = bits of the code); the signs at 15, 19,
// 25, 13, 31, 3, 9, 29. Each PRMT selector takes four 3-bit codes at nibbles 0..3. Pairs of rotations fill
// them: lo = {0, 1, 4, 5} from rotr 6 and rotr 14; hi = {6, 3, 2, 7} from the word, rotr 8 and rotl 8. The
// two elements of a pair (i, i + 4) sit 16 bits apart, so one rotation brings both signs to bit 7 of bytes
// two apart: rotr 8 (elements 0, 4) and rotr 4 (1, 5) for lo, rotr 2 (6, 2) and rotl 2 (3, 7) for hi.
// 18 operations a word (7 rotations, 9 logic ops, 2 PRMT).
//
// Byte j of lo is element kW4a8Lo[j], byte j of hi element kW4a8Hi[j]; the activations are stored in the
// matching order (w4a8_pos).
inline constexpr int kW4a8Lo[4] = {0, 1, 4, 5};
inline constexpr int kW4a8Hi[4] = {6, 3, 2, 7};

// Position of element e (0..31) of an MX block in the W4A8 order: the lane t = e / 8 of the A layout holds
// bytes 4t..4t+3 (register lo) and 16+4t..16+4t+3 (register hi) of the block's 32 k positions.
ORCHID_MXFP4_HD constexpr int w4a8_pos(int e) {
  // Element i of the lane's eight at {0, 1, 18, 17, 2, 3, 16, 19}, 5 bits each (a constant, not a table:
  // indexed at run time a table goes to local memory).
  constexpr uint64_t kPos = 0x9c0628c820ull;
  return int((kPos >> (5 * (e & 7))) & 31u) + 4 * (e >> 3);
}

// The table for d = s - c in [-5, 6]: bytes 0..3 of lo_table, 4..7 of hi_table = e4m3(e2m1 code 0..7 * 2^d).
// Code 1 (0.5) has exponent field d + 6 >= 1, code 7 (6) d + 9 <= 15 with mantissa 4 (384 at d = 6, never
// the NaN pattern). base0 / base1 carry -c: e4m3_lut_bases.
ORCHID_MXFP4_HD void e4m3_lut_bases(int c, uint32_t& base0, uint32_t& base1) {
  base0 = uint32_t(6 - c) * 0x08080800u + 0x0C080000u;
  base1 = uint32_t(6 - c) * 0x08080808u + 0x1C181410u;
}
ORCHID_MXFP4_HD void e4m3_lut(uint32_t s, uint32_t base0, uint32_t base1, uint32_t& t0, uint32_t& t1) {
  t0 = s * 0x08080800u + base0;
  t1 = s * 0x08080808u + base1;
}

ORCHID_MXFP4_HD uint32_t byte_perm(uint32_t a, uint32_t b, uint32_t sel) {
#if defined(__CUDA_ARCH__)
  return __byte_perm(a, b, sel);
#else
  const uint64_t ab = uint64_t(a) | (uint64_t(b) << 32);
  uint32_t r = 0;
  for (int j = 0; j < 4; ++j) {
    const uint32_t n = (sel >> (4 * j)) & 15u;
    uint32_t v = uint32_t(ab >> (8 * (n & 7u))) & 0xffu;
    if (n & 8u) v = (v & 0x80u) ? 0xffu : 0u;
    r |= v << (8 * j);
  }
  return r;
#endif
}

// A stored word's eight elements as e4m3 through the table (t0, t1): lo = elements kW4a8Lo, hi = kW4a8Hi.
ORCHID_MXFP4_HD void to_e4m3x8(uint32_t w, uint32_t t0, uint32_t t1, uint32_t& lo, uint32_t& hi) {
  const uint32_t r8 = rotr(w, 8);
  const uint32_t sel_lo = (rotr(w, 6) & 0x0077u) | (rotr(w, 14) & 0x7700u);
  const uint32_t sel_hi = (w & 0x4037u) | (r8 & 0x3700u) | (rotr(w, 24) & 0x0040u);
  lo = byte_perm(t0, t1, sel_lo) | (r8 & 0x00800080u) | (rotr(w, 4) & 0x80008000u);
  hi = byte_perm(t0, t1, sel_hi) | (rotr(w, 2) & 0x00800080u) | (rotr(w, 30) & 0x80008000u);
}

// The blocks' layout in the same repack: the checkpoint's [rows = E * n][k / 32 MX blocks][16 bytes] becomes
// [kmxp / 4 chunks][rows / 16 row groups][16 rows][4 MX blocks][16 bytes] (n % 16 == 0), kmxp = k / 32
// rounded up to a multiple of 4 (the padding blocks are zero and never used). The kernels read a chunk at a
// time, 16 rows x 4 MX blocks (an m16 tile's slice of k): in the checkpoint's layout 16 pieces of 64 bytes,
// 16 * k / 32 bytes apart; here one kilobyte on a kilobyte boundary, each row's 64 bytes in place as the
// kernels' shared stages hold them (H100: the tiled GEMM 6-10% faster; bench/RESULTS.md, 2026-12-06 third
// run, with the arrangements that were slower for the streaming GEMM). Chunk-major: the warps and CTAs
// that stream neighbouring groups of an expert in step read neighbouring kilobytes (one sweep over the
// expert's chunk c, then chunk c + 1), not kilobytes a whole group's span apart.
ORCHID_MXFP4_HD constexpr int grouped_kmx(int kmx) {
  return (kmx + 3) / 4 * 4;
}
// Bytes of `rows` rows of k columns, repacked.
ORCHID_MXFP4_HD constexpr int64_t grouped_bytes(int64_t rows, int k) {
  return rows * grouped_kmx(k / 32) * 16;
}
// The index of the 16-byte block of row r (e * n + its row in the expert) and MX block mx, in a tensor of
// `rows` rows.
ORCHID_MXFP4_HD constexpr int64_t repacked_block(int64_t r, int mx, int64_t rows) {
  return ((int64_t(mx / 4) * (rows / 16) + r / 16) * 16 + r % 16) * 4 + mx % 4;
}

}  // namespace orchid::kernels::mxfp4_order

#undef ORCHID_MXFP4_HD
