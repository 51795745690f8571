// The MXFP4 word order for the tiled GEMM (kernels/moe/mxfp4_word_order.h), on the host: the repack is a
// bijection, to_original_order undoes it, and each pair's decode of a stored word equals the placements of
// the original word the kernels used before (the shift-and-mask formulas of mxfp4_mma.cuh,
// e2m1_pair_place<I, 6> for bf16 and <I, 9> for f16) on random words, on every single-bit word and on every
// word of one repeated nibble. The W4A8 decode (to_e4m3x8 through e4m3_lut) gives every element of a stored
// word as the e4m3 encoder gives e2m1 * 2^d, for d over the table's whole range, at the positions kW4a8Lo /
// kW4a8Hi say, and w4a8_pos is a permutation that puts lane t's registers at bytes 4t and 16 + 4t. The
// blocks' grouping by 16 rows is a permutation with contiguous chunks.
#include "kernels/moe/mxfp4_word_order.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "core/dtypes.h"

namespace orchid::kernels::mxfp4_order {
namespace {

// mxfp4_mma.cuh's e2m1_pair_place<I, mag_lsb>, written out for the host: the tiled GEMM's bf16 placement
// (mag_lsb 6) and the streaming GEMM's f16 one (9).
uint32_t place(uint32_t w, int I, int mag_lsb) {
  const int ks = 12 - 4 * I, km = mag_lsb - 4 * I;
  const uint32_t s = (ks >= 0 ? (w << ks) : (w >> -ks)) & 0x80008000u;
  const uint32_t m = (km >= 0 ? (w << km) : (w >> -km)) & (0x70007u << mag_lsb);
  return s | m;
}

// The decodes of a stored word, pair by pair.
constexpr uint32_t (*kDecodeBf16[4])(uint32_t) = {pair_to_bf16x2<0>, pair_to_bf16x2<1>, pair_to_bf16x2<2>,
                                                  pair_to_bf16x2<3>};
constexpr uint32_t (*kDecodeF16[4])(uint32_t) = {pair_to_f16x2<0>, pair_to_f16x2<1>, pair_to_f16x2<2>,
                                                 pair_to_f16x2<3>};

void expect_word(uint32_t w) {
  const uint32_t s = to_tiled_order(w);
  ASSERT_EQ(from_tiled_order(s), w) << std::hex << w;
  ASSERT_EQ(to_original_order(s), w) << std::hex << w;
  for (int I = 0; I < 4; ++I) {
    ASSERT_EQ(kDecodeBf16[I](s), place(w, I, 6)) << std::hex << "word " << w << " pair " << I;
    ASSERT_EQ(kDecodeF16[I](s), place(w, I, 9)) << std::hex << "word " << w << " pair " << I << " (f16)";
  }
}

TEST(Mxfp4WordOrder, TheStoredBitsArePermuted) {
  bool seen[32] = {};
  for (int p = 0; p < 32; ++p) {
    ASSERT_FALSE(seen[stored_from(p)]) << p;
    seen[stored_from(p)] = true;
  }
}

TEST(Mxfp4WordOrder, DecodeEqualsTodaysPlacement) {
  for (int b = 0; b < 32; ++b) expect_word(1u << b);
  for (uint32_t n = 0; n < 16; ++n) expect_word(n * 0x11111111u);
  expect_word(0);
  expect_word(0xffffffffu);
  std::mt19937_64 rng(5);
  for (int i = 0; i < 1000000; ++i) expect_word(uint32_t(rng()));
}

// The W4A8 placement of a stored word with the table of d = s - c against the byte-wise encoder.
TEST(Mxfp4WordOrder, W4a8DecodeEqualsTheE4m3OfEachElement) {
  constexpr float kE2m1[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  std::mt19937_64 rng(11);
  const int c = 119;  // any row exponent: the table depends on s - c only
  uint32_t base0, base1;
  e4m3_lut_bases(c, base0, base1);
  for (int d = -5; d <= 6; ++d) {
    uint32_t t0, t1;
    e4m3_lut(uint32_t(c + d), base0, base1, t0, t1);
    auto check = [&](uint32_t w) {
      uint32_t lo, hi;
      to_e4m3x8(to_tiled_order(w), t0, t1, lo, hi);
      for (int j = 0; j < 4; ++j)
        for (const auto& [reg, el] : {std::pair{lo, kW4a8Lo[j]}, std::pair{hi, kW4a8Hi[j]}}) {
          const uint32_t nib = (w >> (4 * el)) & 15u;
          const float v = std::ldexp((nib & 8u) ? -kE2m1[nib & 7u] : kE2m1[nib & 7u], d);
          const uint8_t want = nib == 8u ? 0x80 : float_to_fp8e4m3(v);  // -0 keeps its sign bit
          ASSERT_EQ(uint32_t((reg >> (8 * j)) & 0xffu), uint32_t(want))
              << std::hex << "word " << w << std::dec << " d " << d << " element " << el;
        }
    };
    for (int b = 0; b < 32; ++b) check(1u << b);
    for (uint32_t n = 0; n < 16; ++n) check(n * 0x11111111u);
    for (int i = 0; i < 100000; ++i) check(uint32_t(rng()));
  }
}

TEST(Mxfp4WordOrder, W4a8PositionsAreTheALayout) {
  bool seen[32] = {};
  for (int e = 0; e < 32; ++e) {
    const int p = w4a8_pos(e), t = e / 8;
    ASSERT_FALSE(seen[p]) << e;
    seen[p] = true;
    const int lo_byte = 4 * t, hi_byte = 16 + 4 * t;
    ASSERT_TRUE((p >= lo_byte && p < lo_byte + 4) || (p >= hi_byte && p < hi_byte + 4)) << e;
    const int j = p % 4;
    EXPECT_EQ(e % 8, p < 16 ? kW4a8Lo[j] : kW4a8Hi[j]) << e;
  }
}

// The repacked layout: every block of whole 16-row groups has its own place (the places left over are the
// padding); the 4 MX blocks of a chunk (an m16 tile's slice of k, which the kernels read at once) are one
// kilobyte on a kilobyte boundary; and chunk c of neighbouring groups are neighbouring kilobytes.
TEST(Mxfp4WordOrder, RepackedBlocksArePlacedInWholeAlignedChunksChunkMajor) {
  for (const int kmx : {1, 3, 4, 90}) {
    const int64_t rows = 48, kmxp = grouped_kmx(kmx);
    ASSERT_EQ(kmxp % 4, 0);
    ASSERT_LT(kmxp - kmx, 4);
    ASSERT_EQ(grouped_bytes(rows, 32 * kmx), rows * kmxp * 16);
    std::vector<int> hits(size_t(rows * kmxp), 0);
    for (int64_t r = 0; r < rows; ++r)
      for (int mx = 0; mx < kmx; ++mx) {
        const int64_t b = repacked_block(r, mx, rows);
        ASSERT_GE(b, 0);
        ASSERT_LT(b, rows * kmxp);
        ++hits[size_t(b)];
      }
    int64_t used = 0;
    for (const int h : hits) {
      ASSERT_LE(h, 1) << "kmx " << kmx;
      used += h;
    }
    ASSERT_EQ(used, rows * kmx);
    for (int64_t g = 0; g < rows / 16; ++g)
      for (int mx0 = 0; mx0 < kmx; mx0 += 4) {  // a chunk: 64 blocks, 64-block aligned
        int64_t lo = repacked_block(16 * g, mx0, rows), hi = lo;
        for (int64_t r = 16 * g; r < 16 * g + 16; ++r)
          for (int mx = mx0; mx < std::min(mx0 + 4, kmx); ++mx) {
            lo = std::min(lo, repacked_block(r, mx, rows));
            hi = std::max(hi, repacked_block(r, mx, rows));
          }
        ASSERT_EQ(lo % 64, 0) << "kmx " << kmx << " chunk at " << mx0;
        ASSERT_LT(hi - lo, 64) << "kmx " << kmx << " chunk at " << mx0;
        ASSERT_EQ(lo / 64, mx0 / 4 * (rows / 16) + g) << "chunk-major: kmx " << kmx << " group " << g;
      }
  }
}

}  // namespace
}  // namespace orchid::kernels::mxfp4_order
