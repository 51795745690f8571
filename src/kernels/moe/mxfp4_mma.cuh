// Device helpers shared by the MXFP4 expert GEMMs (mxfp4_gemm.cu: streaming, mxfp4_tiled_gemm.cu: tiled):
// cp.async, the e2m1 -> f16 / bf16 placements and the e8m0 scale (the MMAs: kernels/common/mma_sync.cuh,
// kernels/common/wgmma.cuh).
//
// The k order inside an MMA is free as long as A and B agree. A lane (g = lane/4, t = lane%4) takes the
// 4 bytes 4t..4t+3 of an MX block (elements 8t..8t+7) and pairs element i with i+4 in each 16-bit pair
// register. The streaming kernel stores its activations with each 8-group permuted to [0,4,1,5,2,6,3,7]
// ("MX order"): one 16-byte shared load then gives the mma.sync B registers of both k16 steps of the block.
// (The tiled kernel's wgmma reads its token rows as a plain K-major operand and permutes whole 32-column
// blocks instead: mxfp4_tiled_gemm.h.)
#pragma once

#include <cuda_fp16.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "kernels/common/mma_sync.cuh"
#include "kernels/moe/mxfp4_word_order.h"

namespace orchid::kernels::mxfp4_detail {

// Whether the MXFP4 GEMMs (the streaming kernel, and the tiled kernel's mma.sync loop for token tiles of up
// to 16 rows: decode at up to ~64 sequences) run a ring stage whose MX blocks all lie within k as
// straight-line code, without the per-block guard the stage holding the end of k needs. In the SASS of the
// guarded loop each block's shared loads wait for the branch after the previous block's MMAs (one chain of
// load, dequantize and MMA a block: ncu at 64 tokens on an H100, 0.86 eligible warps of 4.15 a scheduler);
// straight, the compiler interleaves them. On by default (H200, decode steps at ctx 1024: -3.4% / -4.2% /
// -1.5% / -0.9% at batch 1 / 2 / 16 / 64; bench/RESULTS.md); ORCHID_MXFP4_STRAIGHT=0 turns it off (read
// once, host).
inline bool mxfp4_straight_chunks() {
  static const bool on = [] {
    const char* v = std::getenv("ORCHID_MXFP4_STRAIGHT");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return on;
}

// Whether the tiled GEMM's wgmma loop for two m-tiles a warp (256-row CTAs, token tiles of 24-48 rows: decode
// at ~100-256 sequences) runs a wgmma group per m-tile, so that one m-tile's next block is dequantized while
// the other's MMAs run (no second register set). On by default (H200, decode steps at ctx 1024: -1.2% /
// -0.8% at batch 128 / 256; bench/RESULTS.md); ORCHID_MXFP4_MT_PIPE=0 turns it off (read once, host).
inline bool mxfp4_mt_pipe() {
  static const bool on = [] {
    const char* v = std::getenv("ORCHID_MXFP4_MT_PIPE");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return on;
}

__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, bool valid) {
  const uint32_t s = uint32_t(__cvta_generic_to_shared(smem));
  const int n = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(n));
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// Element i and i+4 of the 8 e2m1 nibbles in w (element i = bits 4i..4i+3) -> one 16-bit float pair with the
// sign at bit 15 and (e1 e0 m) at bits kMagLsb+2..kMagLsb, i.e. the exponent field's two low bits = e and the
// mantissa msb = m; e = 0 lands in the subnormals, exactly 0 or 0.5 * 2^(1-bias). So the pair holds
// e2m1 * 2^(1-bias) exactly: f16 (kMagLsb 9) e2m1 * 2^-14, bf16 (kMagLsb 6) e2m1 * 2^-126.
template <int I, int kMagLsb>
__device__ __forceinline__ uint32_t e2m1_pair_place(uint32_t w) {
  constexpr int kSign = 12 - 4 * I, kMag = kMagLsb - 4 * I;
  constexpr uint32_t kMagMask = 0x70007u << kMagLsb;
  const uint32_t s = (kSign >= 0 ? (w << kSign) : (w >> -kSign)) & 0x80008000u;
  const uint32_t m = (kMag >= 0 ? (w << kMag) : (w >> -kMag)) & kMagMask;
  return s | m;
}
template <int I>
__device__ __forceinline__ uint32_t e2m1_pair_to_f16x2(uint32_t w) {
  return e2m1_pair_place<I, 9>(w);
}
template <int I>
__device__ __forceinline__ uint32_t e2m1_pair_to_bf16x2(uint32_t w) {
  return e2m1_pair_place<I, 6>(w);
}

// The placements of a word of expert blocks in either storage order: as in the checkpoint (above), or
// mxfp4_word_order.h's (kTiledOrder: fewer operations, the same registers).
template <bool kTiledOrder, int I>
__device__ __forceinline__ uint32_t pair_f16x2(uint32_t w) {
  if constexpr (kTiledOrder)
    return mxfp4_order::pair_to_f16x2<I>(w);
  else
    return e2m1_pair_to_f16x2<I>(w);
}
template <bool kTiledOrder, int I>
__device__ __forceinline__ uint32_t pair_bf16x2(uint32_t w) {
  if constexpr (kTiledOrder)
    return mxfp4_order::pair_to_bf16x2<I>(w);
  else
    return e2m1_pair_to_bf16x2<I>(w);
}

// a * b on bf16x2 (round to nearest, subnormals kept).
__device__ __forceinline__ uint32_t mul_bf16x2(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("mul.rn.bf16x2 %0, %1, %2;\n" : "=r"(d) : "r"(a), "r"(b));
  return d;
}

// 2^(s-127) * 2^14 (undoing the f16 placement above). Scales above 2^113 saturate to infinity.
__device__ __forceinline__ float mx_scale(uint32_t s) {
  return __uint_as_float(min(s + 14u, 255u) << 23);
}

// The factor that turns the bf16 placement (e2m1 * 2^-126) into e2m1 * 2^(s-127-bias): 2^(s-1-bias) in both
// halves of a bf16x2, exponent field s + 126 - bias (in 0..254 for s <= 254, bias = max(0, smax - 128)).
__device__ __forceinline__ uint32_t mx_scale_bf16x2(uint32_t s, uint32_t base) {
  return s * 0x00800080u + base;  // base = (126 - bias) * 0x00800080
}

// Eight bf16 values (one 16-byte load) in MX order, as they are (the bf16 MMAs of the tiled word order):
// word q holds elements q and q + 4, the pair the weights' placement puts in one register.
__device__ __forceinline__ uint4 bf16x8_mx_order(const uint4& v) {
  return make_uint4(__byte_perm(v.x, v.z, 0x5410), __byte_perm(v.x, v.z, 0x7632),
                    __byte_perm(v.y, v.w, 0x5410), __byte_perm(v.y, v.w, 0x7632));
}

// Eight bf16 values (one 16-byte load) -> f16 in MX order; values beyond the f16 range saturate to +-65504.
__device__ __forceinline__ uint4 bf16x8_to_f16_mx_order(const uint4& v) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
  float f[8];
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    f[2 * q] = __uint_as_float(w[q] << 16);
    f[2 * q + 1] = __uint_as_float(w[q] & 0xffff0000u);
  }
  auto h2 = [](float lo, float hi) {
    const __half2 h =
        __floats2half2_rn(fminf(fmaxf(lo, -65504.0f), 65504.0f), fminf(fmaxf(hi, -65504.0f), 65504.0f));
    return *reinterpret_cast<const uint32_t*>(&h);
  };
  return make_uint4(h2(f[0], f[4]), h2(f[1], f[5]), h2(f[2], f[6]), h2(f[3], f[7]));
}

}  // namespace orchid::kernels::mxfp4_detail
