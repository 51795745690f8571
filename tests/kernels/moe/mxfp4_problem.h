// One MXFP4 expert-GEMM problem for the kernel tests (streaming and tiled): random MXFP4 experts with scales
// 2^-9..2^-3 (or a given e8m0 range), bf16 inputs that fp16 holds exactly (so the reference sees the kernels'
// operands), an optional row map (gathered inputs), biases, and the fp64 reference on the exactly dequantized
// weights: y = x W^T, or with swiglu z = SwiGLU(u + b1) on the interleaved gate/up rows.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernel_reference.h"
#include "kernel_test_util.h"
#include "kernels/moe/moe_activation.h"
#include "kernels/moe/mxfp4_word_order.h"

namespace orchid::testing {

// MXFP4 blocks [rows][k / 32][16 bytes] in the form mxfp4_to_tiled_order gives them on the device at load
// (every 32-bit word in mxfp4_word_order.h's order, the 16-byte blocks grouped by 16 rows and padded with
// zero blocks, chunk-major: repacked_block), for the kernels' tiled_order runs. rows % 16 == 0.
inline std::vector<uint8_t> mxfp4_in_tiled_order(const std::vector<uint8_t>& blocks, int k) {
  namespace order = orchid::kernels::mxfp4_order;
  const int kmx = k / 32;
  const int64_t rows = int64_t(blocks.size()) / (int64_t(kmx) * 16);
  std::vector<uint8_t> out(size_t(order::grouped_bytes(rows, k)), 0);
  for (int64_t r = 0; r < rows; ++r)
    for (int mx = 0; mx < kmx; ++mx) {
      const uint8_t* from = blocks.data() + (r * kmx + mx) * 16;
      uint8_t* to = out.data() + order::repacked_block(r, mx, rows) * 16;
      for (int i = 0; i < 16; i += 4) {
        uint32_t w;
        std::memcpy(&w, from + i, 4);
        w = order::to_tiled_order(w);
        std::memcpy(to + i, &w, 4);
      }
    }
  return out;
}

struct Mxfp4Problem {
  int experts = 0, n = 0, k = 0, rows = 0, x_rows = 0, out_cols = 0;
  std::vector<int> offsets;  // [E+1]
  std::vector<uint8_t> blocks, scales;
  std::vector<uint16_t> x, bias;  // bf16 [x_rows, k], [E, n]
  std::vector<int> map;           // row -> x row (identity unless gathered), at least one entry
  std::vector<double> ref;        // [rows, out_cols]
  double ref_rms = 0;
};

inline Mxfp4Problem make_mxfp4_problem(std::mt19937_64& rng, int n, int k, const std::vector<int>& sizes,
                                       bool gather, bool swiglu, int scale_lo = 118, int scale_hi = 124) {
  Mxfp4Problem p;
  p.experts = int(sizes.size());
  p.n = n;
  p.k = k;
  const int E = p.experts, kb = k / 32;
  p.offsets.assign(size_t(E) + 1, 0);
  for (int e = 0; e < E; ++e) p.offsets[size_t(e) + 1] = p.offsets[size_t(e)] + sizes[size_t(e)];
  p.rows = p.offsets[size_t(E)];
  p.blocks.resize(size_t(E) * n * kb * 16);
  p.scales.resize(size_t(E) * n * kb);
  std::uniform_int_distribution<int> byte(0, 255), sc(scale_lo, scale_hi);
  for (auto& b : p.blocks) b = uint8_t(byte(rng));
  for (auto& s : p.scales) s = uint8_t(sc(rng));
  p.x_rows = std::max(gather ? p.rows + 3 : p.rows, 1);
  p.x = random_bf16(rng, size_t(p.x_rows) * k, 1.0f);
  for (auto& v : p.x)
    if (std::fabs(bf16_to_float(v)) < std::ldexp(1.0f, -14)) v = 0;
  p.map.assign(size_t(std::max(p.rows, 1)), 0);
  for (int r = 0; r < p.rows; ++r) p.map[size_t(r)] = gather ? (r * 7 + 3) % p.x_rows : r;
  const auto xf = bf16_to_floats(p.x);

  std::vector<double> u(size_t(p.rows) * n);
  std::vector<float> wf(size_t(n) * k), xe;
  for (int e = 0; e < E; ++e) {
    const int m = sizes[size_t(e)];
    if (m == 0) continue;
    orchid::ref::mxfp4_to_float(&p.blocks[size_t(e) * n * kb * 16], &p.scales[size_t(e) * n * kb], n, k,
                                wf.data());
    xe.assign(size_t(m) * k, 0);
    for (int i = 0; i < m; ++i)
      std::copy_n(&xf[size_t(p.map[size_t(p.offsets[size_t(e)] + i)]) * k], k, &xe[size_t(i) * k]);
    orchid::ref::gemm(m, n, k, xe.data(), k, wf.data(), nullptr, &u[size_t(p.offsets[size_t(e)]) * n]);
  }
  p.bias = random_bf16(rng, size_t(E) * n, 1.0f);
  p.out_cols = swiglu ? n / 2 : n;
  if (swiglu) {
    const auto bias_f = bf16_to_floats(p.bias);
    const kernels::SwigluParams sp;
    p.ref.resize(size_t(p.rows) * p.out_cols);
    for (int e = 0; e < E; ++e)
      for (int r = p.offsets[size_t(e)]; r < p.offsets[size_t(e) + 1]; ++r)
        for (int i = 0; i < p.out_cols; ++i)
          p.ref[size_t(r) * p.out_cols + i] = orchid::ref::swiglu(
              float(u[size_t(r) * n + 2 * i] + bias_f[size_t(e) * n + 2 * i]),
              float(u[size_t(r) * n + 2 * i + 1] + bias_f[size_t(e) * n + 2 * i + 1]), sp.limit, sp.alpha);
  } else {
    p.ref = std::move(u);
  }
  for (double v : p.ref) p.ref_rms += v * v;
  p.ref_rms = std::sqrt(p.ref_rms / double(std::max<size_t>(1, p.ref.size())));
  return p;
}

}  // namespace orchid::testing
