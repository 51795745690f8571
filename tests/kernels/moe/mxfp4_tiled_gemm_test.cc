// MXFP4 tiled expert GEMM, its work plan and its activation layout, against CPU references: the plan
// exactly (empty experts, one expert holding every row, 128 experts, rows not a multiple of the tile); the
// activation gather and permutation bit for bit; the GEMM against fp64 on the exactly dequantized weights
// for every tile size and both CTA shapes, odd rows per expert, partial token tiles (every wgmma width), a
// partial CTA tile (a warpgroup with no rows of its own), k not a multiple of 128, gathered rows, the fused
// SwiGLU epilogue (tiled-order output), and MX scales across the whole e8m0 range (the per-warp exponent
// bias).
#include "kernels/moe/mxfp4_tiled_gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "kernel_test_util.h"
#include "mxfp4_problem.h"

namespace orchid::kernels {
namespace {

using orchid::testing::DeviceBuffer;

std::vector<int> offsets_of(const std::vector<int>& sizes) {
  std::vector<int> off(sizes.size() + 1, 0);
  for (size_t e = 0; e < sizes.size(); ++e) off[e + 1] = off[e] + sizes[e];
  return off;
}

// ---------------------------------------------------------------- plan
TEST(Mxfp4TiledPlan, MatchesReference) {
  ORCHID_REQUIRE_GPU_OR_SKIP();
  std::mt19937_64 rng(orchid::testing::named_seed("tiled_plan"));
  std::vector<std::vector<int>> cases = {
      {0, 0, 0, 0}, {5, 0, 17, 32, 33, 0, 1, 64}, {0, 0, 1000, 0}, std::vector<int>(128, 3)};
  std::vector<int> random_sizes(128);
  for (auto& s : random_sizes) s = int(rng() % 80);
  cases.push_back(random_sizes);
  for (const auto& sizes : cases) {
    for (int tt : kMxfp4TileTokens) {
      const int E = int(sizes.size());
      const auto off = offsets_of(sizes);
      const int M = off[E];
      const int max_tiles = mxfp4_tiled_max_tiles(M, E, tt);
      std::vector<int> want;
      for (int e = 0; e < E; ++e)
        for (int r = 0; r < sizes[e]; r += tt) want.insert(want.end(), {e, r});
      ASSERT_LE(int(want.size()) / 2, max_tiles) << "the bound must hold";
      // Entries past the real tiles are {-1, 0}.
      const int real = int(want.size()) / 2;
      want.resize(size_t(2 * max_tiles), 0);
      for (int i = real; i < max_tiles; ++i) want[size_t(2 * i)] = -1;
      if (max_tiles == 0) continue;
      DeviceBuffer<int> doff, dtiles(size_t(2 * max_tiles));
      doff.upload(off);
      orchid::testing::poison(dtiles);
      mxfp4_tiled_plan(doff.get(), E, tt, dtiles.get(), max_tiles, nullptr);
      ORCHID_TEST_CUDA(cudaDeviceSynchronize());
      const std::string name =
          "plan E" + std::to_string(E) + " M" + std::to_string(M) + " tile" + std::to_string(tt);
      EXPECT_TRUE(orchid::testing::check_exact(name.c_str(), dtiles.download(), want));
    }
  }
}

// ---------------------------------------------------------------- activation layout
TEST(Mxfp4TiledActivation, ExactGatherAndPermutation) {
  ORCHID_REQUIRE_GPU_OR_SKIP();
  std::mt19937_64 rng(orchid::testing::named_seed("tiled_activation"));
  const int rows = 37, k = 2880, out_rows = 50;
  auto x = orchid::testing::random_bf16(rng, size_t(rows) * k, 4.0f);
  x[5] = float_to_bf16(1e30f);  // bf16 values beyond any f16 range pass through unchanged
  x[6] = float_to_bf16(-3e-30f);
  std::vector<int> map(out_rows);
  for (auto& r : map) r = int(rng() % rows);
  DeviceBuffer<uint16_t> dx, dout(size_t(out_rows) * k);
  DeviceBuffer<int> dmap;
  dx.upload(x);
  dmap.upload(map);
  for (const bool gather : {false, true}) {
    const int n = gather ? out_rows : rows;
    orchid::testing::poison(dout);
    mxfp4_tiled_activation(dx.get(), n, k, dout.get(), nullptr, gather ? dmap.get() : nullptr);
    ORCHID_TEST_CUDA(cudaDeviceSynchronize());
    auto got = dout.download();
    got.resize(size_t(n) * k);
    std::vector<uint16_t> want(size_t(n) * k);
    for (int r = 0; r < n; ++r)
      std::copy_n(x.begin() + int64_t(gather ? map[size_t(r)] : r) * k, k, want.begin() + int64_t(r) * k);
    EXPECT_TRUE(orchid::testing::check_exact(
        gather ? "tiled order, gathered" : "tiled order",
        orchid::testing::from_block_order(got, size_t(k), mxfp4_tiled_pos), want));
  }
}

// The plan and the gather in one launch (what the layer runs): the same outputs as the two launches.
TEST(Mxfp4TiledPrepare, SameAsPlanAndActivation) {
  ORCHID_REQUIRE_GPU_OR_SKIP();
  std::mt19937_64 rng(orchid::testing::named_seed("tiled_prepare"));
  const int rows = 61, k = 2880;
  auto x = orchid::testing::random_bf16(rng, size_t(rows) * k, 2.0f);
  DeviceBuffer<uint16_t> dx;
  dx.upload(x);
  for (const int E : {32, 128})
    for (const int tt : {16, 48}) {
      std::vector<int> sizes(size_t(E), 0);
      int M = 0;
      for (int i = 0; i < 4 * rows; ++i) ++sizes[rng() % size_t(E)], ++M;
      const auto off = offsets_of(sizes);
      std::vector<int> map(static_cast<size_t>(M));
      for (auto& r : map) r = int(rng() % rows);
      const int max_tiles = mxfp4_tiled_max_tiles(M, E, tt);
      DeviceBuffer<int> doff, dmap, tiles_a(size_t(2 * max_tiles)), tiles_b(size_t(2 * max_tiles));
      DeviceBuffer<uint16_t> act_a(size_t(M) * k), act_b(size_t(M) * k);
      doff.upload(off);
      dmap.upload(map);
      for (auto* b : {&act_a, &act_b}) orchid::testing::poison(*b);
      for (auto* b : {&tiles_a, &tiles_b}) orchid::testing::poison(*b);
      mxfp4_tiled_plan(doff.get(), E, tt, tiles_a.get(), max_tiles, nullptr);
      mxfp4_tiled_activation(dx.get(), M, k, act_a.get(), nullptr, dmap.get());
      mxfp4_tiled_prepare(dx.get(), M, k, act_b.get(), dmap.get(), doff.get(), E, tt, tiles_b.get(),
                          max_tiles, nullptr);
      ORCHID_TEST_CUDA(cudaDeviceSynchronize());
      const std::string name = "prepare E" + std::to_string(E) + " tile" + std::to_string(tt);
      EXPECT_TRUE(
          orchid::testing::check_exact((name + " tiles").c_str(), tiles_b.download(), tiles_a.download()));
      EXPECT_TRUE(orchid::testing::check_exact((name + " rows").c_str(), act_b.download(), act_a.download()));
    }
}

// The order is a permutation of each 32-column block.
TEST(Mxfp4TiledActivation, OrderIsAPermutation) {
  std::vector<int> seen(32, 0);
  for (int e = 0; e < 32; ++e) {
    const int p = mxfp4_tiled_pos(e);
    ASSERT_TRUE(p >= 0 && p < 32) << e;
    ++seen[size_t(p)];
  }
  EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), 32);
}

// ---------------------------------------------------------------- GEMM
struct Case {
  const char* name;
  int n, k, tile_tokens;
  std::vector<int> sizes;              // rows per expert
  bool gather;                         // read x through a row map
  bool swiglu = false;                 // fused bias + SwiGLU epilogue (output n/2 columns, tiled order)
  int scale_lo = 118, scale_hi = 124;  // e8m0 range of the weights' MX scales
};

class Mxfp4TiledGemmTest : public ::testing::TestWithParam<Case> {};

TEST_P(Mxfp4TiledGemmTest, MatchesReference) {
  ORCHID_REQUIRE_GPU_OR_SKIP();
  const Case c = GetParam();
  std::mt19937_64 rng(orchid::testing::named_seed(c.name));
  const auto p =
      orchid::testing::make_mxfp4_problem(rng, c.n, c.k, c.sizes, c.gather, c.swiglu, c.scale_lo, c.scale_hi);
  const int E = p.experts, M = p.rows;

  DeviceBuffer<uint8_t> db, db_tiled, ds;
  DeviceBuffer<uint16_t> dx, dx16(size_t(p.x_rows) * c.k), dbias;
  DeviceBuffer<int> doff, dmap;
  db.upload(p.blocks);
  db_tiled.upload(orchid::testing::mxfp4_in_tiled_order(p.blocks, p.k));
  ds.upload(p.scales);
  dx.upload(p.x);
  doff.upload(p.offsets);
  dmap.upload(p.map);
  dbias.upload(p.bias);
  // The permuted rows gathered by the activation kernel, as the layer does it.
  DeviceBuffer<uint16_t> dxg(size_t(std::max(M, 1)) * c.k);
  mxfp4_tiled_activation(dx.get(), M, c.k, dxg.get(), nullptr, c.gather ? dmap.get() : nullptr);
  const int max_tiles = mxfp4_tiled_max_tiles(M, E, c.tile_tokens);
  DeviceBuffer<int> dtiles(size_t(2 * std::max(max_tiles, 1)));
  mxfp4_tiled_plan(doff.get(), E, c.tile_tokens, dtiles.get(), max_tiles, nullptr);
  DeviceBuffer<uint16_t> dy(size_t(std::max(M, 1)) * p.out_cols);
  const std::pair<Mxfp4TiledShape, const char*> shapes[] = {{Mxfp4TiledShape::kRows128, "rows128"},
                                                            {Mxfp4TiledShape::kRows256, "rows256"}};
  for (const bool tiled_order : {false, true})  // the blocks as in the checkpoint, and reordered at load
    for (const auto& [shape, shape_name] : shapes) {
      if (shape == Mxfp4TiledShape::kRows256 && c.tile_tokens >= 64)
        continue;  // not instantiated (registers)
      orchid::testing::poison(dy);
      Mxfp4TiledArgs a;
      a.cta_shape = shape;
      a.num_experts = E;
      a.n = c.n;
      a.k = c.k;
      a.tile_tokens = c.tile_tokens;
      a.offsets = doff.get();
      a.tiles = dtiles.get();
      a.max_tiles = max_tiles;
      a.blocks = tiled_order ? db_tiled.get() : db.get();
      a.tiled_order = tiled_order;
      a.scales = ds.get();
      a.x = dxg.get();
      a.x_row_count = M;
      a.y = dy.get();
      a.swiglu_bias = c.swiglu ? dbias.get() : nullptr;
      mxfp4_tiled_gemm(a, nullptr);
      ORCHID_TEST_CUDA(cudaDeviceSynchronize());
      auto raw = dy.download();
      raw.resize(size_t(M) * p.out_cols);
      const auto got = orchid::testing::bf16_to_floats(
          c.swiglu ? orchid::testing::from_block_order(raw, size_t(p.out_cols), mxfp4_tiled_pos) : raw);
      // bf16 output keeps 8 bits: the relative bound is the output rounding's.
      const std::string name = std::string(c.name) + " " + shape_name + (tiled_order ? " tiled order" : "");
      EXPECT_TRUE(orchid::testing::check_close(name.c_str(), got, p.ref, 2e-3 * p.ref_rms, 8e-3, 5e-3));
    }
}

// 64-token tiles on 256-row CTAs are refused with a clear error (not instantiated).
// 64- and 128-token tiles exist for 128-row CTAs only: the 256-row shape refuses them.
TEST(Mxfp4TiledGemm, RefusesTile64And128OnRows256) {
  ORCHID_REQUIRE_GPU_OR_SKIP();
  DeviceBuffer<uint8_t> db(32 * 16), ds(32);
  DeviceBuffer<uint16_t> dx(32), dy(64);
  DeviceBuffer<int> doff(2), dtiles(2);
  Mxfp4TiledArgs a;
  a.cta_shape = Mxfp4TiledShape::kRows256;
  a.num_experts = 1;
  a.n = 32;
  a.k = 32;
  a.tile_tokens = 64;
  a.offsets = doff.get();
  a.tiles = dtiles.get();
  a.max_tiles = 1;
  a.blocks = db.get();
  a.scales = ds.get();
  a.x = dx.get();
  a.x_row_count = 1;
  a.y = dy.get();
  EXPECT_THROW(mxfp4_tiled_gemm(a, nullptr), std::exception);
  a.tile_tokens = 128;
  EXPECT_THROW(mxfp4_tiled_gemm(a, nullptr), std::exception);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, Mxfp4TiledGemmTest,
    ::testing::Values(
        Case{"t16_gate_up_odd_rows", 5760, 2880, 16, {0, 3, 0, 9, 1, 0, 17, 2}, true},
        Case{"t32_down_partial_cta_tile", 2880, 2880, 32, {1, 0, 33, 40, 64, 31}, false},
        Case{"t64_down_many_tiles", 2880, 2880, 64, {65, 0, 200, 1, 128, 7}, false},
        // 128-token tiles (one CTA an SM): full and partial tiles, the 64- and 128-wide loops (a tile's rows
        // rounded up to 64), an empty expert, with and without the epilogue.
        Case{"t128_down_partial_tiles", 2880, 2880, 128, {129, 0, 300, 1, 64, 65, 128}, false},
        Case{"t128_gate_up_swiglu", 5760, 2880, 128, {200, 3, 0, 128, 70}, true, true},
        Case{"t128_k160_partial_chunk", 128, 160, 128, {130, 0, 7}, true},
        Case{"t48_gate_up_decode_256", 5760, 2880, 48, {33, 47, 48, 49, 0, 20, 96, 1}, true},
        Case{"t48_swiglu", 5760, 2880, 48, {40, 0, 9, 57}, true, true},
        Case{"t32_one_expert_holds_all", 2880, 2880, 32, {0, 0, 0, 301, 0, 0}, false},
        Case{"t16_k96_partial_chunk", 64, 96, 16, {2, 0, 19, 16}, true},
        Case{"t64_k160_partial_chunk", 128, 160, 64, {70, 0, 1}, true},
        Case{"t32_gate_up_swiglu", 5760, 2880, 32, {12, 0, 1, 40, 33, 0, 0, 5}, true, true},
        // The last CTA holds 64 rows: one warpgroup of a 128-row CTA; in a 256-row CTA (t48) two warps with
        // rows and two without in the first warpgroup.
        Case{"t64_swiglu_partial_cta", 2880 * 2 - 128 * 3 + 64, 2880, 64, {100, 3, 0, 64}, false, true},
        Case{"t48_swiglu_partial_cta", 2880 * 2 - 128 * 3 + 64, 2880, 48, {100, 3, 0, 64}, false, true},
        Case{"t16_swiglu_small", 192, 96, 16, {5, 17, 0, 1}, true, true},
        Case{"t32_all_empty", 256, 2880, 32, {0, 0, 0, 0}, false},
        // Every wgmma width (the tile's rows rounded up to 8) once per expert, with and without the epilogue.
        Case{"t64_every_width",
             384,
             2880,
             64,
             {8, 16, 24, 32, 40, 48, 56, 64, 1, 9, 17, 25, 33, 41, 49, 57},
             true},
        Case{"t48_every_width_swiglu",
             640,
             288,
             48,
             {1, 8, 9, 16, 17, 24, 25, 32, 33, 40, 41, 48},
             false,
             true},
        // Scales far above 2^1 (an exponent bias of up to 116) and far below, and rows mixing them; the
        // outputs stay in the normal fp32 range. (Not with the SwiGLU epilogue: sums of ~1e6 that cancel
        // down to the clamp's +-7 are beyond fp32 accumulation, whatever the kernel.)
        Case{"t16_huge_scales", 256, 2880, 16, {3, 0, 17}, true, false, 236, 244},
        Case{"t32_tiny_scales", 256, 2880, 32, {33, 2}, false, false, 20, 28},
        Case{"t16_mixed_scales", 512, 2880, 16, {9, 20}, true, false, 100, 140},
        Case{"t16_e128_decode",
             512,
             2880,
             16,
             {1, 0, 2, 0, 0, 3, 0, 1, 0, 0, 0, 4, 0, 0, 5, 0, 1, 1, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9,
              0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
              0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
              0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7},
             true}),
    [](const ::testing::TestParamInfo<Case>& i) { return std::string(i.param.name); });

}  // namespace
}  // namespace orchid::kernels
