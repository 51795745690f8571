// MXFP4 streaming expert GEMM vs an fp64 reference on the exactly dequantized weights: gpt-oss shapes
// (gate_up 5760x2880, down 2880x2880 with a partial 128-row CTA tile), 0/1/odd/9..64 rows per expert (one
// and two MMA n-tiles, several token passes), a k that is not a multiple of 128, gathered input rows, and k
// split over 2/4/8 warps (with slices left empty), MX scales from 2^-107 to 2^109; every case in the
// checkpoint's word order (f16 MMAs) and the tiled one (bf16 MMAs, the scale in the weights). The default
// shape (mxfp4_stream_shape) takes 4-warp CTAs on these small grids, with k split in two where they are
// fewest.
#include "kernels/moe/mxfp4_gemm.h"

#include "kernels/moe/weight_convert.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>

#include "kernel_test_util.h"
#include "mxfp4_problem.h"

namespace orchid::kernels {
namespace {

using orchid::testing::DeviceBuffer;

struct Case {
  const char* name;
  int n, k;
  std::vector<int> sizes;              // rows per expert
  bool gather;                         // read x through a row map
  bool swiglu = false;                 // fused bias + SwiGLU epilogue (output n/2 columns)
  int k_split = 0;                     // warps sharing 16 rows, each a slice of k (0: the kernel's choice)
  int scale_lo = 118, scale_hi = 124;  // e8m0 range of the weights' MX scales
};

class Mxfp4GemmTest : public ::testing::TestWithParam<Case> {};

TEST_P(Mxfp4GemmTest, MatchesReference) {
  ORCHID_REQUIRE_GPU_OR_SKIP();
  const Case c = GetParam();
  std::mt19937_64 rng(orchid::testing::named_seed(c.name));
  const auto p =
      orchid::testing::make_mxfp4_problem(rng, c.n, c.k, c.sizes, c.gather, c.swiglu, c.scale_lo, c.scale_hi);
  const int E = p.experts, M = p.rows;
  std::vector<int> active;
  for (int e = 0; e < E; ++e)
    if (c.sizes[e] > 0) active.push_back(e);
  const int num_active = int(active.size());
  active.resize(E, -1);
  const int max_rows = *std::max_element(c.sizes.begin(), c.sizes.end());

  DeviceBuffer<uint8_t> db, db_tiled, ds;
  DeviceBuffer<uint16_t> dx, dbias;
  DeviceBuffer<int> doff, dact, dnact, dmap;
  db.upload(p.blocks);
  db_tiled.upload(orchid::testing::mxfp4_in_tiled_order(p.blocks, p.k));
  ds.upload(p.scales);
  dx.upload(p.x);
  doff.upload(p.offsets);
  dact.upload(active);
  dnact.upload(std::vector<int>{num_active});
  dmap.upload(p.map);
  dbias.upload(p.bias);
  DeviceBuffer<uint16_t> dy(size_t(std::max(M, 1)) * p.out_cols);
  orchid::testing::poison(dy);
  Mxfp4GemmArgs a;
  a.num_experts = E;
  a.n = c.n;
  a.k = c.k;
  a.offsets = doff.get();
  a.active = dact.get();
  a.num_active = dnact.get();
  a.max_active = E;
  a.max_rows_per_expert = max_rows;
  a.blocks = db.get();
  a.scales = ds.get();
  a.x = dx.get();
  a.x_rows = c.gather ? dmap.get() : nullptr;
  a.y = dy.get();
  a.swiglu_bias = c.swiglu ? dbias.get() : nullptr;
  a.k_split = c.k_split;
  a.cta_warps = c.k_split ? 8 : 0;  // an explicit split on 8-warp CTAs; else the kernel's own shape
  for (const bool tiled_order : {false, true}) {  // the blocks as in the checkpoint, and reordered at load
    a.blocks = tiled_order ? db_tiled.get() : db.get();
    a.tiled_order = tiled_order;
    orchid::testing::poison(dy);
    mxfp4_moe_gemm(a, nullptr);
    ORCHID_TEST_CUDA(cudaDeviceSynchronize());
    auto got = orchid::testing::bf16_to_floats(dy.download());
    got.resize(size_t(M) * p.out_cols);
    const std::string name = std::string(c.name) + (tiled_order ? " tiled order" : "");
    EXPECT_TRUE(orchid::testing::check_close(name.c_str(), got, p.ref, 2e-3 * p.ref_rms, 8e-3, 5e-3));
  }

  // The tensor's largest scale, computed on the device as at load, against the host's; with it the tiled
  // order skips the bias (every scale <= 128) or falls back to reducing one: the same bits either way.
  DeviceBuffer<uint32_t> dmax(1);
  mxfp4_scale_max(ds.get(), int64_t(p.scales.size()), dmax.get(), nullptr);
  ORCHID_TEST_CUDA(cudaDeviceSynchronize());
  const uint32_t host_max = p.scales.empty() ? 0u : *std::max_element(p.scales.begin(), p.scales.end());
  EXPECT_EQ(dmax.download()[0], host_max) << c.name;
  a.blocks = db_tiled.get();
  a.tiled_order = true;
  orchid::testing::poison(dy);
  mxfp4_moe_gemm(a, nullptr);
  ORCHID_TEST_CUDA(cudaDeviceSynchronize());
  const auto without = dy.download();
  a.scale_max = dmax.get();
  orchid::testing::poison(dy);
  mxfp4_moe_gemm(a, nullptr);
  ORCHID_TEST_CUDA(cudaDeviceSynchronize());
  const auto with = dy.download();
  size_t differ = 0;
  for (size_t i = 0; i < size_t(M) * p.out_cols; ++i) differ += with[i] != without[i];
  EXPECT_EQ(differ, 0u) << c.name << ": the tiled order with the scale maximum (" << host_max << ")";
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, Mxfp4GemmTest,
    ::testing::Values(
        Case{"gate_up_decode_t1", 5760, 2880, {0, 1, 0, 1, 1, 0, 0, 1}, true},
        Case{"gate_up_odd_rows", 5760, 2880, {0, 3, 0, 5, 1, 0, 7, 2}, true},
        Case{"down_partial_cta_tile", 2880, 2880, {1, 0, 2, 5}, false},
        Case{"two_ntiles_and_passes", 2880, 2880, {9, 17, 0, 64, 33, 0, 1, 16}, false},
        Case{"k96_partial_chunk", 64, 96, {2, 0, 11}, true},
        Case{"all_empty_but_one", 256, 2880, {0, 0, 0, 0, 0, 0, 0, 4}, false},
        Case{"gate_up_swiglu_fused", 5760, 2880, {2, 0, 1, 0, 3, 0, 0, 1}, true, true},
        Case{"swiglu_fused_two_ntiles", 512, 2880, {12, 0, 1, 20}, false, true},
        // k split over 2, 4 or 8 warps of a 16-row block (slices of 45 / 22-23 / 11-12 MX
        // blocks; with k = 96 slices of one block and empty ones), every epilogue
        // One token on 8-warp CTAs without a split (the kernel held to three CTAs an SM), fused epilogue
        Case{"gate_up_decode_t1_w8", 5760, 2880, {0, 1, 0, 1, 1, 0, 0, 1}, true, true, 1},
        Case{"gate_up_decode_t1_ks2", 5760, 2880, {0, 1, 0, 1, 1, 0, 0, 1}, true, false, 2},
        Case{"down_partial_cta_tile_ks4", 2880, 2880, {1, 0, 2, 5}, false, false, 4},
        Case{"two_ntiles_and_passes_ks8", 2880, 2880, {9, 17, 0, 64, 33, 0, 1, 16}, false, false, 8},
        Case{"swiglu_fused_ks4", 5760, 2880, {2, 0, 1, 0, 3, 0, 0, 1}, true, true, 4},
        Case{"swiglu_two_ntiles_ks2", 512, 2880, {12, 0, 1, 20}, false, true, 2},
        Case{"k96_ks2", 64, 96, {2, 0, 11}, true, false, 2},
        Case{"k96_ks8_empty_slices", 64, 96, {2, 0, 11}, true, false, 8},
        // MX scales far from 2^0: the tiled order's bf16 path carries 2^-bias in its weights when the
        // largest scale of a 16-row block passes 2^1 (bias = smax - 128), the f16 path saturates above
        // 2^113 (so the huge case stops at 2^109).
        Case{"huge_scales", 256, 2880, {3, 0, 5}, true, false, 0, 228, 236},
        Case{"tiny_scales", 256, 2880, {1, 2}, false, false, 0, 20, 28},
        Case{"mixed_scales_ks2", 512, 2880, {2, 7}, true, false, 2, 100, 140}),
    [](const ::testing::TestParamInfo<Case>& i) { return std::string(i.param.name); });

}  // namespace
}  // namespace orchid::kernels
