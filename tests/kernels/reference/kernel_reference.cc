#include "kernel_reference.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/dtypes.h"
#include "core/thread_pool.h"

namespace orchid::ref {

void gemm(int m, int n, int k, const float* x, int64_t ldx, const float* w, const float* bias, double* y) {
  ThreadPool::global().parallel_for(size_t(m) * n, 64, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
      const int64_t r = int64_t(i / n), c = int64_t(i % n);
      const float* xr = x + r * ldx;
      const float* wr = w + c * k;
      double acc = 0.0;
      for (int j = 0; j < k; ++j) acc += double(xr[j]) * double(wr[j]);
      y[i] = acc + (bias ? double(bias[c]) : 0.0);
    }
  });
}

void topk_softmax(const float* logits, int num_tokens, int num_experts, int top_k, int* idx, float* w) {
  std::vector<int> order(num_experts);
  for (int t = 0; t < num_tokens; ++t) {
    const float* l = logits + int64_t(t) * num_experts;
    for (int e = 0; e < num_experts; ++e) order[e] = e;
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return l[a] > l[b]; });
    double sum = 0.0;
    for (int j = 0; j < top_k; ++j) sum += std::exp(double(l[order[j]]) - double(l[order[0]]));
    for (int j = 0; j < top_k; ++j) {
      idx[int64_t(t) * top_k + j] = order[j];
      w[int64_t(t) * top_k + j] = float(std::exp(double(l[order[j]]) - double(l[order[0]])) / sum);
    }
  }
}

Permutation permute(const int* topk_idx, int num_tokens, int num_experts, int top_k) {
  const int items = num_tokens * top_k;
  Permutation p;
  p.offsets.assign(num_experts + 1, 0);
  for (int i = 0; i < items; ++i) p.offsets[topk_idx[i] + 1]++;
  for (int e = 0; e < num_experts; ++e) p.offsets[e + 1] += p.offsets[e];
  std::vector<int> fill(p.offsets.begin(), p.offsets.end() - 1);
  p.row_token.assign(items, -1);
  p.row_expert.assign(items, -1);
  p.slot_row.assign(items, -1);
  for (int i = 0; i < items; ++i) {  // increasing item order within an expert: stable
    const int e = topk_idx[i];
    const int row = fill[e]++;
    p.row_token[row] = i / top_k;
    p.row_expert[row] = e;
    p.slot_row[i] = row;
  }
  for (int e = 0; e < num_experts; ++e)
    if (p.offsets[e + 1] > p.offsets[e]) p.active.push_back(e);
  return p;
}

void quant_fp8_row(const float* v, int k, uint8_t* q, float* scale) {
  const int kpad = (k + 127) / 128 * 128;
  for (int g = 0; g < kpad / 128; ++g) {
    float amax = 0.0f;
    for (int c = g * 128; c < std::min(k, g * 128 + 128); ++c) amax = std::max(amax, std::fabs(v[c]));
    float s = 1.0f, inv = 1.0f;
    if (amax > 0.0f) {
      s = amax / kFp8E4M3Max;
      inv = kFp8E4M3Max / amax;
    }
    scale[g] = s;
    for (int c = g * 128; c < g * 128 + 128; ++c) q[c] = c < k ? float_to_fp8e4m3(v[c] * inv) : 0;
  }
}

float swiglu(float gate, float up, float limit, float alpha) {
  const float g = std::min(gate, limit);
  const float l = std::min(std::max(up, -limit), limit);
  const float sig = 1.0f / (1.0f + std::exp(-alpha * g));
  return g * sig * (l + 1.0f);
}

void mxfp4_to_float(const uint8_t* blocks, const uint8_t* scales, int64_t rows, int k, float* out) {
  const int kb = k / 32;
  for (int64_t r = 0; r < rows; ++r) {
    for (int b = 0; b < kb; ++b) {
      const float s = e8m0_to_float(scales[r * kb + b]);
      for (int j = 0; j < 16; ++j) {
        const uint8_t byte = blocks[(r * kb + b) * 16 + j];
        out[r * k + b * 32 + 2 * j] = e2m1_to_float(byte & 0xf) * s;
        out[r * k + b * 32 + 2 * j + 1] = e2m1_to_float(byte >> 4) * s;
      }
    }
  }
}

void fp8_block_quant(const float* w, int experts, int n, int k, Fp8Rule rule, uint8_t* q, float* scale) {
  const int kpad = (k + 127) / 128 * 128, rb_count = (n + 127) / 128, cb_count = kpad / 128;
  for (int e = 0; e < experts; ++e) {
    for (int rb = 0; rb < rb_count; ++rb) {
      for (int cb = 0; cb < cb_count; ++cb) {
        const int r_end = std::min(n, rb * 128 + 128), c_end = std::min(k, cb * 128 + 128);
        float amax = 0.0f;
        for (int r = rb * 128; r < r_end; ++r)
          for (int c = cb * 128; c < c_end; ++c)
            amax = std::fmax(amax, std::fabs(w[(int64_t(e) * n + r) * k + c]));
        float s = 1.0f, inv = 1.0f;
        if (amax > 0.0f) {
          if (rule == Fp8Rule::kAmaxOver448) {
            s = amax / kFp8E4M3Max;
            inv = kFp8E4M3Max / amax;
          } else {
            int ex;
            const float mant = std::frexp(amax, &ex);
            int p = mant <= 0.875f ? ex - 9 : ex - 8;
            p = std::clamp(p, -126, 127);
            s = std::ldexp(1.0f, p);
            inv = std::ldexp(1.0f, -p);
          }
        }
        scale[(int64_t(e) * rb_count + rb) * cb_count + cb] = s;
        for (int r = rb * 128; r < r_end; ++r)
          for (int c = cb * 128; c < cb * 128 + 128; ++c)
            q[(int64_t(e) * n + r) * kpad + c] =
                c < k ? float_to_fp8e4m3(w[(int64_t(e) * n + r) * k + c] * inv) : 0;
      }
    }
  }
}

void fp8_block_dequant(const uint8_t* q, const float* scale, int experts, int n, int k, float* out) {
  const int kpad = (k + 127) / 128 * 128, rb_count = (n + 127) / 128, cb_count = kpad / 128;
  for (int e = 0; e < experts; ++e)
    for (int r = 0; r < n; ++r)
      for (int c = 0; c < k; ++c)
        out[(int64_t(e) * n + r) * k + c] = fp8e4m3_to_float(q[(int64_t(e) * n + r) * kpad + c]) *
                                            scale[(int64_t(e) * rb_count + r / 128) * cb_count + c / 128];
}

}  // namespace orchid::ref
