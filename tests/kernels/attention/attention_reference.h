// Plain C++ references for the attention kernels: the QKV bias + RoPE row transform (fp32, the kernel's
// specified arithmetic) and sink attention (double). They read logical per-sequence K/V arrays, not the paged
// cache, so the kernels' paging is checked against an independent indexing.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <thread>
#include <vector>

#include "core/dtypes.h"
#include "kernels/attention/yarn.h"
#include "model/rope.h"

namespace orchid::kernels::attention::reference {

// Runs f(i) for i in [0, n) on all hardware threads.
template <typename F>
void parallel_for(size_t n, const F& f) {
  const size_t threads = std::max<size_t>(1, std::min<size_t>(std::thread::hardware_concurrency(), 64));
  std::vector<std::thread> pool;
  for (size_t w = 0; w < threads; ++w)
    pool.emplace_back([&, w] {
      for (size_t i = w; i < n; i += threads) f(i);
    });
  for (auto& t : pool) t.join();
}

// One token's row x = qkv (bf16 values as float) with `bias` (as float, or null) at position `pos`:
// q, k (rotated) and v as bf16 bit patterns, head-major, 64 dims per head.
// cos/sin (times the concentration) of the fp32 angle float(pos) * inv_freq[j], for j < 32: the model
// layer's definition, shared with the CPU backend.
inline void rope_cos_sin(int pos, const RopeFrequencies& f, float* c, float* s) {
  for (int j = 0; j < 32; ++j) model::rope_cos_sin(f, pos, j, &c[j], &s[j]);
}

// The same row in fp32 (precise layers: no rounding of q, k, v).
inline void qkv_rope_row_f32(const float* x, const float* bias, int pos, const RopeFrequencies& f, int hq,
                             int hkv, float* q, float* k, float* v) {
  float c[32], s[32];
  rope_cos_sin(pos, f, c, s);
  auto xb = [&](int col) { return bias != nullptr ? x[col] + bias[col] : x[col]; };
  for (int head = 0; head < hq + hkv; ++head) {
    float* dst = head < hq ? q + head * 64 : k + (head - hq) * 64;
    for (int j = 0; j < 32; ++j) {
      const float a = xb(head * 64 + j), b = xb(head * 64 + j + 32);
      const float p1 = a * c[j], p2 = b * s[j], p3 = b * c[j], p4 = a * s[j];
      dst[j] = p1 - p2;
      dst[j + 32] = p3 + p4;
    }
  }
  for (int i = 0; i < hkv * 64; ++i) v[i] = xb((hq + hkv) * 64 + i);
}

inline void qkv_rope_row(const float* x, const float* bias, int pos, const RopeFrequencies& f, int hq,
                         int hkv, uint16_t* q, uint16_t* k, uint16_t* v) {
  std::vector<float> qf(size_t(hq) * 64), kf(size_t(hkv) * 64), vf(size_t(hkv) * 64);
  qkv_rope_row_f32(x, bias, pos, f, hq, hkv, qf.data(), kf.data(), vf.data());
  for (size_t i = 0; i < qf.size(); ++i) q[i] = float_to_bf16(qf[i]);
  for (size_t i = 0; i < kf.size(); ++i) k[i] = float_to_bf16(kf[i]);
  for (size_t i = 0; i < vf.size(); ++i) v[i] = float_to_bf16(vf[i]);
}

// Attention of one query row over keys [lo, hi] (inclusive) of one KV head, in double.
// q [64]; k, v: logical [ctx][hkv][64] of the sequence; g: the KV head; sink: raw logit or null.
inline void sink_attention_row(const float* q, const std::vector<float>& k, const std::vector<float>& v,
                               int hkv, int g, int lo, int hi, double scale, const float* sink, double* out) {
  std::vector<double> s(size_t(hi - lo + 1));
  double m = sink != nullptr ? double(*sink) : -INFINITY;
  for (int t = lo; t <= hi; ++t) {
    const float* kt = &k[(size_t(t) * hkv + g) * 64];
    double dot = 0;
    for (int d = 0; d < 64; ++d) dot += double(q[d]) * double(kt[d]);
    s[size_t(t - lo)] = dot * scale;
    m = std::max(m, s[size_t(t - lo)]);
  }
  double denom = sink != nullptr ? std::exp(double(*sink) - m) : 0.0;
  double acc[64] = {};
  for (int t = lo; t <= hi; ++t) {
    const double p = std::exp(s[size_t(t - lo)] - m);
    denom += p;
    const float* vt = &v[(size_t(t) * hkv + g) * 64];
    for (int d = 0; d < 64; ++d) acc[d] += p * double(vt[d]);
  }
  for (int d = 0; d < 64; ++d) out[d] = acc[d] / denom;
}

}  // namespace orchid::kernels::attention::reference
