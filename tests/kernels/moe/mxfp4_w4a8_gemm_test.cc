// MXFP4 x FP8 (W4A8) expert GEMM and its activation quantization, against CPU references: the quantization
// bit for bit (per-row scale, W4A8 column order, gathered rows, an all-zero row, k not a multiple of 128);
// the GEMM against fp64 on the exactly dequantized weights and the kernel's own e4m3 activations (so only
// fp32 accumulation and the bf16 output separate them), for every tile size, odd rows per expert, empty
// experts, one expert holding every row, a partial 128-row CTA tile, k not a multiple of 128, gathered rows,
// the fused SwiGLU epilogue and MX scales across the e8m0 range; and against the bf16 activations, to bound
// what the e4m3 rounding of the activations costs.
#include "kernels/moe/mxfp4_w4a8_gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/dtypes.h"
#include "kernel_test_util.h"
#include "kernels/moe/mxfp4_tiled_gemm.h"
#include "mxfp4_problem.h"

namespace orchid::kernels {
namespace {

using orchid::testing::DeviceBuffer;

// Position of column c within its 32-column block in W4A8 order.
int w4a8_slot(int c) {
  const int i = c % 32;
  return c - i + (i % 2 == 0 ? i / 2 : 16 + i / 2);
}

// The documented rule: s = amax/448, inv = 448/amax (1 and 1 for an all-zero row), q = e4m3(v * inv).
void quantize_row_ref(const float* v, int k, uint8_t* q, float* scale) {
  float amax = 0.0f;
  for (int c = 0; c < k; ++c) amax = std::max(amax, std::fabs(v[c]));
  float s = 1.0f, inv = 1.0f;
  if (amax > 0.0f) {
    s = amax / 448.0f;
    inv = 448.0f / amax;
  }
  *scale = s;
  for (int c = 0; c < k; ++c) q[w4a8_slot(c)] = float_to_fp8e4m3(v[c] * inv);
}

// Activations as the GEMM sees them: q * scale per row, back in natural column order.
std::vector<float> dequantize(const std::vector<uint8_t>& q, const std::vector<float>& scale, int rows,
                              int k) {
  std::vector<float> out(size_t(rows) * k);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < k; ++c)
      out[size_t(r) * k + c] = fp8e4m3_to_float(q[size_t(r) * k + w4a8_slot(c)]) * scale[size_t(r)];
  return out;
}

TEST(Mxfp4W4a8Quantize, MatchesReference) {
  ORCHID_REQUIRE_GPU_OR_SKIP();
  for (const int k : {2880, 96}) {
    std::mt19937_64 rng(orchid::testing::named_seed(k == 96 ? "w4a8_quant_k96" : "w4a8_quant_k2880"));
    const int src_rows = 37, rows = 41;
    auto x = orchid::testing::random_bf16(rng, size_t(src_rows) * k, 2.0f);
    for (int c = 0; c < k; ++c) x[size_t(5) * k + c] = 0;  // an all-zero row: scale 1, q 0
    for (int c = 0; c < k; c += 7) x[size_t(9) * k + c] = float_to_bf16(float(c) * 1e3f);  // wide range
    std::vector<int> map(rows);
    for (int r = 0; r < rows; ++r) map[size_t(r)] = (r * 11 + 5) % src_rows;
    const auto xf = orchid::testing::bf16_to_floats(x);
    DeviceBuffer<uint16_t> dx;
    DeviceBuffer<int> dmap;
    dx.upload(x);
    dmap.upload(map);
    for (const bool gather : {false, true}) {
      const int n = gather ? rows : src_rows;
      DeviceBuffer<uint8_t> q(size_t(n) * k);
      DeviceBuffer<float> s{size_t(n)};
      orchid::testing::poison(q);
      orchid::testing::poison(s);
      mxfp4_w4a8_quantize(dx.get(), gather ? dmap.get() : nullptr, n, k, q.get(), s.get(), nullptr);
      ORCHID_TEST_CUDA(cudaDeviceSynchronize());
      std::vector<uint8_t> rq(size_t(n) * k);
      std::vector<float> rs(static_cast<size_t>(n));
      for (int r = 0; r < n; ++r)
        quantize_row_ref(&xf[size_t(gather ? map[size_t(r)] : r) * k], k, &rq[size_t(r) * k], &rs[size_t(r)]);
      const std::string name = "w4a8 quantize k" + std::to_string(k) + (gather ? " gathered" : "");
      EXPECT_TRUE(orchid::testing::check_exact((name + " q").c_str(), q.download(), rq));
      EXPECT_TRUE(orchid::testing::check_exact((name + " scale").c_str(), s.download(), rs));
    }
  }
}

struct Case {
  const char* name;
  int n, k, tile_tokens;
  std::vector<int> sizes;  // rows per expert
  bool gather;             // read x through a row map
  bool swiglu = false;     // fused bias + SwiGLU epilogue (output n/2 columns)
  int scale_lo = 118, scale_hi = 124;
};

class Mxfp4W4a8GemmTest : public ::testing::TestWithParam<Case> {};

TEST_P(Mxfp4W4a8GemmTest, MatchesReference) {
  ORCHID_REQUIRE_GPU_OR_SKIP();
  const Case c = GetParam();
  std::mt19937_64 rng(orchid::testing::named_seed(c.name));
  const auto p =
      orchid::testing::make_mxfp4_problem(rng, c.n, c.k, c.sizes, c.gather, c.swiglu, c.scale_lo, c.scale_hi);
  const int E = p.experts, M = p.rows;

  DeviceBuffer<uint8_t> db, ds, dq(size_t(p.x_rows) * c.k);
  DeviceBuffer<uint16_t> dx, dbias;
  DeviceBuffer<float> dqs(size_t(p.x_rows));
  DeviceBuffer<int> doff, dmap;
  db.upload(p.blocks);
  ds.upload(p.scales);
  dx.upload(p.x);
  doff.upload(p.offsets);
  dmap.upload(p.map);
  dbias.upload(p.bias);
  mxfp4_w4a8_quantize(dx.get(), nullptr, p.x_rows, c.k, dq.get(), dqs.get(), nullptr);
  const int max_tiles = mxfp4_tiled_max_tiles(M, E, c.tile_tokens);
  DeviceBuffer<int> dtiles(size_t(2 * std::max(max_tiles, 1)));
  mxfp4_tiled_plan(doff.get(), E, c.tile_tokens, dtiles.get(), max_tiles, nullptr);
  DeviceBuffer<uint16_t> dy(size_t(std::max(M, 1)) * p.out_cols);
  orchid::testing::poison(dy);
  Mxfp4W4a8Args a;
  a.num_experts = E;
  a.n = c.n;
  a.k = c.k;
  a.tile_tokens = c.tile_tokens;
  a.offsets = doff.get();
  a.tiles = dtiles.get();
  a.max_tiles = max_tiles;
  a.blocks = db.get();
  a.scales = ds.get();
  a.x = dq.get();
  a.x_scale = dqs.get();
  a.x_rows = c.gather ? dmap.get() : nullptr;
  a.y = dy.get();
  a.swiglu_bias = c.swiglu ? dbias.get() : nullptr;
  mxfp4_w4a8_gemm(a, nullptr);
  ORCHID_TEST_CUDA(cudaDeviceSynchronize());
  auto raw = dy.download();
  raw.resize(size_t(M) * p.out_cols);
  const auto got = orchid::testing::bf16_to_floats(raw);

  // Against the kernel's own e4m3 activations: fp32 sums and the bf16 output are all that differ.
  double rms_q = 0;
  const auto ref_q = orchid::testing::mxfp4_reference(
      p, dequantize(dq.download(), dqs.download(), p.x_rows, c.k), c.swiglu, &rms_q);
  EXPECT_TRUE(orchid::testing::check_close((std::string(c.name) + " vs e4m3 x").c_str(), got, ref_q,
                                           2e-3 * rms_q, 8e-3, 5e-3));
  // Against the bf16 activations: the e4m3 rounding of x (3 mantissa bits, ~2.5% rms per element) averages
  // over k in the sums.
  EXPECT_TRUE(orchid::testing::check_close((std::string(c.name) + " vs bf16 x").c_str(), got, p.ref,
                                           0.5 * p.ref_rms + 1e-30, 1.0, 4e-2));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, Mxfp4W4a8GemmTest,
    ::testing::Values(
        Case{"w4a8_t8_gate_up_decode", 5760, 2880, 8, {0, 3, 0, 9, 1, 0, 17, 2, 8, 7}, true},
        Case{"w4a8_t16_gate_up_odd_rows", 5760, 2880, 16, {0, 3, 0, 9, 1, 0, 17, 2}, true},
        Case{"w4a8_t32_down_partial_cta_tile", 2880, 2880, 32, {1, 0, 33, 40, 64, 31}, false},
        Case{"w4a8_t16_down_many_tiles", 2880, 2880, 16, {65, 0, 200, 1, 128, 7}, false},
        Case{"w4a8_t8_swiglu", 5760, 2880, 8, {4, 0, 9, 12}, true, true},
        Case{"w4a8_t16_swiglu", 5760, 2880, 16, {40, 0, 9, 17}, true, true},
        Case{"w4a8_t32_swiglu_partial_cta", 2880 * 2 - 128 * 3 + 16, 2880, 32, {100, 3, 0, 64}, false, true},
        Case{"w4a8_t32_one_expert_holds_all", 2880, 2880, 32, {0, 0, 0, 301, 0, 0}, false},
        Case{"w4a8_t16_k96_partial_chunk", 64, 96, 16, {2, 0, 19, 16}, true},
        Case{"w4a8_t8_k160_partial_chunk", 128, 160, 8, {70, 0, 1}, true},
        Case{"w4a8_t16_swiglu_small", 192, 96, 16, {5, 17, 0, 1}, true, true},
        Case{"w4a8_t32_all_empty", 256, 2880, 32, {0, 0, 0, 0}, false},
        Case{"w4a8_t16_huge_scales", 256, 2880, 16, {3, 0, 17}, true, false, 200, 230},
        Case{"w4a8_t32_tiny_scales", 256, 2880, 32, {33, 2}, false, false, 20, 28},
        Case{"w4a8_t8_mixed_scales", 512, 2880, 8, {9, 20}, true, false, 100, 140}),
    [](const ::testing::TestParamInfo<Case>& i) { return std::string(i.param.name); });

}  // namespace
}  // namespace orchid::kernels
