// Which MXFP4 kernel a step takes (mxfp4_path): the streaming kernel for the smallest batches, the tiled
// kernel up to a crossover that scales with the expert count (the FP8 conversion's fixed cost grows with the
// experts, the per-token costs do not), the FP8 conversion above; the tile table by the rows per expert.
// Host only: the choice is host logic.
#include <gtest/gtest.h>

#include <limits>

#include "kernels/moe/moe_layer.h"
#include "kernels/moe/mxfp4_w4a8_gemm.h"

namespace orchid::kernels {
namespace {

// The conversion above the tiled range (the W4A8 GEMM, the default there, has a test of its own).
MoeConfig config(int experts) {
  MoeConfig c;
  c.experts = experts;
  c.top_k = 4;
  c.weights = MoeWeights::kMxfp4;
  c.max_tokens = 16384;
  c.mxfp4_w4a8 = false;
  return c;
}

TEST(Mxfp4Path, StreamingThenTiledThenConversionAt32Experts) {
  const MoeConfig c = config(32);
  EXPECT_EQ(mxfp4_path(c, 1).kind, Mxfp4Path::kStream);
  EXPECT_EQ(mxfp4_path(c, 2).kind, Mxfp4Path::kStream);
  EXPECT_EQ(mxfp4_path(c, 3).kind, Mxfp4Path::kTiled);
  EXPECT_EQ(mxfp4_path(c, 1024).kind, Mxfp4Path::kTiled);
  EXPECT_EQ(mxfp4_path(c, 1025).kind, Mxfp4Path::kConvertFp8);
}

TEST(Mxfp4Path, CrossoverScalesWithTheExperts) {
  const MoeConfig c120 = config(128);
  EXPECT_EQ(mxfp4_path(c120, 4096).kind, Mxfp4Path::kTiled);
  EXPECT_EQ(mxfp4_path(c120, 4097).kind, Mxfp4Path::kConvertFp8);
  const MoeConfig small = config(8);  // fewer than 32 experts: the 32-expert crossover
  EXPECT_EQ(mxfp4_path(small, 1024).kind, Mxfp4Path::kTiled);
  EXPECT_EQ(mxfp4_path(small, 1025).kind, Mxfp4Path::kConvertFp8);
  MoeConfig fixed = config(128);
  fixed.mxfp4_tiled_max_tokens = 0;  // an override wins: no tiled steps at all
  EXPECT_EQ(mxfp4_path(fixed, 3).kind, Mxfp4Path::kConvertFp8);
}

// The W4A8 GEMM takes the conversion's steps where the config asks for it, the blocks are in the tiled order
// and the SwiGLU clamp is finite (its output's fixed scale); otherwise the conversion stays.
TEST(Mxfp4Path, W4a8TakesTheConversionsStepsWhereItApplies) {
  EXPECT_TRUE(MoeConfig{}.mxfp4_w4a8);  // the default
  MoeConfig c = config(32);
  c.mxfp4_w4a8 = true;
  EXPECT_EQ(mxfp4_path(c, 8192).kind, Mxfp4Path::kConvertFp8);  // checkpoint order
  c.mxfp4_tiled_order = true;
  EXPECT_EQ(mxfp4_path(c, 1024).kind, Mxfp4Path::kTiled);
  EXPECT_EQ(mxfp4_path(c, 1025).kind, Mxfp4Path::kW4a8);
  EXPECT_EQ(mxfp4_path(c, 8192).kind, Mxfp4Path::kW4a8);
  MoeConfig unclamped = c;
  unclamped.swiglu_limit = std::numeric_limits<float>::infinity();
  EXPECT_EQ(mxfp4_path(unclamped, 8192).kind, Mxfp4Path::kConvertFp8);
  EXPECT_FLOAT_EQ(mxfp4_w4a8_z_scale(SwigluParams{7.0f, 1.702f}), 0.125f);  // 56 / 448
}

TEST(Mxfp4Path, TileByRowsPerExpert) {
  MoeConfig c = config(32);
  c.mxfp4_tiled_max_tokens = 16384;  // as ORCHID_MXFP4_TILED_MAX_TOKENS does, to reach the large tiles
  struct Want {
    int tokens;
    Mxfp4TiledShape shape;
    int tile_tokens;
  };
  // rows per expert = tokens * 4 / 32, rounded down: the table's bounds 12, 24, 64 and 128 on either side
  for (const Want& w :
       {Want{16, Mxfp4TiledShape::kRows256, 16}, Want{96, Mxfp4TiledShape::kRows256, 16},
        Want{104, Mxfp4TiledShape::kRows256, 32}, Want{192, Mxfp4TiledShape::kRows256, 32},
        Want{200, Mxfp4TiledShape::kRows256, 48}, Want{512, Mxfp4TiledShape::kRows256, 48},
        Want{520, Mxfp4TiledShape::kRows128, 64}, Want{1024, Mxfp4TiledShape::kRows128, 64},
        Want{1032, Mxfp4TiledShape::kRows128, 128}, Want{8192, Mxfp4TiledShape::kRows128, 128}}) {
    const Mxfp4Path p = mxfp4_path(c, w.tokens);
    EXPECT_EQ(p.kind, Mxfp4Path::kTiled) << w.tokens;
    EXPECT_EQ(p.shape, w.shape) << w.tokens;
    EXPECT_EQ(p.tile_tokens, w.tile_tokens) << w.tokens;
    bool instantiated = false;  // every choice is a tile size the GEMM is built for
    for (int t : kMxfp4TileTokens) instantiated |= t == p.tile_tokens;
    EXPECT_TRUE(instantiated) << w.tokens;
    // 64- and 128-token tiles exist for 128-row CTAs only (mxfp4_tiled_gemm.h).
    if (p.tile_tokens >= 64) {
      EXPECT_EQ(p.shape, Mxfp4TiledShape::kRows128) << w.tokens;
    }
    EXPECT_EQ(p.down_shape, p.shape) << w.tokens;  // unless mxfp4_down_rows says otherwise
  }
}

TEST(Mxfp4Path, DownRowsOverrideOnlyWhereTheTileAllowsIt) {
  MoeConfig c = config(32);
  c.mxfp4_tiled_max_tokens = 16384;
  c.mxfp4_down_rows = 128;
  Mxfp4Path p = mxfp4_path(c, 256);  // 32 rows an expert: 256 x 48 for gate_up
  EXPECT_EQ(p.shape, Mxfp4TiledShape::kRows256);
  EXPECT_EQ(p.down_shape, Mxfp4TiledShape::kRows128);
  c.mxfp4_down_rows = 256;
  p = mxfp4_path(c, 1024);  // 128 rows an expert: 64-token tiles, built for 128-row CTAs only
  EXPECT_EQ(p.tile_tokens, 64);
  EXPECT_EQ(p.down_shape, Mxfp4TiledShape::kRows128);
  p = mxfp4_path(c, 64);  // 8 rows an expert: 16-token tiles
  EXPECT_EQ(p.down_shape, Mxfp4TiledShape::kRows256);
  c.mxfp4_down_rows = 7;  // not a CTA shape: the table's
  EXPECT_EQ(mxfp4_path(c, 64).down_shape, p.shape);
}

}  // namespace
}  // namespace orchid::kernels
