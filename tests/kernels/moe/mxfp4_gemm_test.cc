// MXFP4 streaming expert GEMM vs an fp64 reference on the exactly dequantized weights: gpt-oss shapes
// (gate_up 5760x2880, down 2880x2880 with a partial 128-row CTA tile), 0/1/odd/9..64 rows per expert (one
// and two MMA n-tiles, several token passes), a k that is not a multiple of 128, and gathered input rows.
#include "kernels/moe/mxfp4_gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "kernel_reference.h"
#include "kernel_test_util.h"

namespace orchid::kernels {
namespace {

using orchid::testing::DeviceBuffer;

struct Case {
  const char* name;
  int n, k;
  std::vector<int> sizes;  // rows per expert
  bool gather;             // read x through a row map
  bool swiglu = false;     // fused bias + SwiGLU epilogue (output n/2 columns)
};

class Mxfp4GemmTest : public ::testing::TestWithParam<Case> {};

TEST_P(Mxfp4GemmTest, MatchesReference) {
  ORCHID_REQUIRE_GPU_OR_SKIP();
  const Case c = GetParam();
  std::mt19937_64 rng(orchid::testing::named_seed(c.name));
  const int E = int(c.sizes.size()), n = c.n, k = c.k, kb = k / 32;
  std::vector<int> off(E + 1, 0), active;
  for (int e = 0; e < E; ++e) {
    off[e + 1] = off[e] + c.sizes[e];
    if (c.sizes[e] > 0) active.push_back(e);
  }
  const int M = off[E], num_active = int(active.size());
  active.resize(E, -1);
  int max_rows = 0;
  for (int s : c.sizes) max_rows = std::max(max_rows, s);

  std::vector<uint8_t> blocks(size_t(E) * n * kb * 16), scales(size_t(E) * n * kb);
  std::uniform_int_distribution<int> byte(0, 255), sc(118, 124);
  for (auto& b : blocks) b = uint8_t(byte(rng));
  for (auto& s : scales) s = uint8_t(sc(rng));
  // x: bf16 values that fp16 holds exactly (|v| >= 2^-14 or 0), so the reference sees the kernel's operands.
  const int xrows = c.gather ? M + 3 : M;
  auto x = orchid::testing::random_bf16(rng, size_t(std::max(xrows, 1)) * k, 1.0f);
  for (auto& v : x)
    if (std::fabs(bf16_to_float(v)) < std::ldexp(1.0f, -14)) v = 0;
  std::vector<int> map(std::max(M, 1));
  for (int r = 0; r < M; ++r) map[r] = c.gather ? (r * 7 + 3) % xrows : r;
  const auto xf = orchid::testing::bf16_to_floats(x);

  std::vector<double> ref(size_t(M) * n);
  std::vector<float> wf(size_t(n) * k), xe;
  for (int e = 0; e < E; ++e) {
    const int m = c.sizes[e];
    if (m == 0) continue;
    orchid::ref::mxfp4_to_float(&blocks[size_t(e) * n * kb * 16], &scales[size_t(e) * n * kb], n, k,
                                wf.data());
    xe.assign(size_t(m) * k, 0);
    for (int i = 0; i < m; ++i) std::copy_n(&xf[size_t(map[off[e] + i]) * k], k, &xe[size_t(i) * k]);
    orchid::ref::gemm(m, n, k, xe.data(), k, wf.data(), nullptr, &ref[size_t(off[e]) * n]);
  }

  DeviceBuffer<uint8_t> db, ds;
  DeviceBuffer<uint16_t> dx;
  DeviceBuffer<int> doff, dact, dnact, dmap;
  db.upload(blocks);
  ds.upload(scales);
  dx.upload(x);
  doff.upload(off);
  dact.upload(active);
  dnact.upload(std::vector<int>{num_active});
  dmap.upload(map);
  // Fused epilogue: z[r, i] = swiglu(u[r, 2i] + b[e, 2i], u[r, 2i+1] + b[e, 2i+1]) from the same reference u.
  const int out_cols = c.swiglu ? n / 2 : n;
  auto bias = orchid::testing::random_bf16(rng, size_t(E) * n, 1.0f);
  const auto bias_f = orchid::testing::bf16_to_floats(bias);
  if (c.swiglu) {
    std::vector<double> z(size_t(M) * out_cols);
    const SwigluParams sp;
    for (int e = 0; e < E; ++e)
      for (int r = off[e]; r < off[e + 1]; ++r)
        for (int i = 0; i < out_cols; ++i)
          z[size_t(r) * out_cols + i] = orchid::ref::swiglu(
              float(ref[size_t(r) * n + 2 * i] + bias_f[size_t(e) * n + 2 * i]),
              float(ref[size_t(r) * n + 2 * i + 1] + bias_f[size_t(e) * n + 2 * i + 1]), sp.limit, sp.alpha);
    ref = std::move(z);
  }
  DeviceBuffer<uint16_t> dbias;
  dbias.upload(bias);
  DeviceBuffer<uint16_t> dy(size_t(std::max(M, 1)) * out_cols);
  orchid::testing::poison(dy);
  Mxfp4GemmArgs a;
  a.num_experts = E;
  a.n = n;
  a.k = k;
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
  mxfp4_moe_gemm(a, nullptr);
  ORCHID_TEST_CUDA(cudaDeviceSynchronize());
  auto got = orchid::testing::bf16_to_floats(dy.download());
  got.resize(size_t(M) * out_cols);
  double rms = 0;
  for (double v : ref) rms += v * v;
  rms = std::sqrt(rms / double(std::max<size_t>(1, ref.size())));
  EXPECT_TRUE(orchid::testing::check_close(c.name, got, ref, 2e-3 * rms, 8e-3, 5e-3));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, Mxfp4GemmTest,
    ::testing::Values(Case{"gate_up_decode_t1", 5760, 2880, {0, 1, 0, 1, 1, 0, 0, 1}, true},
                      Case{"gate_up_odd_rows", 5760, 2880, {0, 3, 0, 5, 1, 0, 7, 2}, true},
                      Case{"down_partial_cta_tile", 2880, 2880, {1, 0, 2, 5}, false},
                      Case{"two_ntiles_and_passes", 2880, 2880, {9, 17, 0, 64, 33, 0, 1, 16}, false},
                      Case{"k96_partial_chunk", 64, 96, {2, 0, 11}, true},
                      Case{"all_empty_but_one", 256, 2880, {0, 0, 0, 0, 0, 0, 0, 4}, false},
                      Case{"gate_up_swiglu_fused", 5760, 2880, {2, 0, 1, 0, 3, 0, 0, 1}, true, true},
                      Case{"swiglu_fused_two_ntiles", 512, 2880, {12, 0, 1, 20}, false, true}),
    [](const ::testing::TestParamInfo<Case>& i) { return std::string(i.param.name); });

}  // namespace
}  // namespace orchid::kernels
