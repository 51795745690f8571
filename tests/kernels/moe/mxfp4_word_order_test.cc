// The MXFP4 word order for the tiled GEMM (kernels/moe/mxfp4_word_order.h), on the host: the repack is a
// bijection, to_original_order undoes it, and each pair's decode of a stored word equals the placements of
// the original word the kernels used before (the shift-and-mask formulas of mxfp4_mma.cuh,
// e2m1_pair_place<I, 6> for bf16 and <I, 9> for f16) on random words, on every single-bit word and on every
// word of one repeated nibble. The blocks' grouping by 16 rows is a permutation with contiguous chunks.
#include "kernels/moe/mxfp4_word_order.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

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
