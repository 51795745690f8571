// YaRN ("NTK-by-parts") rotary frequencies and concentration, computed on the host once per model and used
// by the RoPE kernel (passed by value) and by its CPU reference alike (gpt-oss-model.md §3).
//   freq_i = theta^(2i/d), i < d/2;  low/high = d/2 * ln(L0 / (beta * 2 pi)) / ln(theta) for
//   beta_fast/beta_slow (floored/ceiled only when `truncate`; clamped to [0, d - 1]);  ramp_i = clamp((i -
//   low) / (high - low), 0, 1) inv_freq_i = ramp_i / (factor * freq_i) + (1 - ramp_i) / freq_i; concentration
//   = 0.1 ln(factor) + 1.
// Plain RoPE (rope.yarn false, or factor <= 1): inv_freq_i = 1 / freq_i, concentration 1.
// Computed in double and rounded to fp32 once (the reference implementations compute in fp32; the two agree
// to a few fp32 ulps, see tests/kernels/attention/yarn_test.cc).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <vector>

#include "model/config.h"

namespace orchid::kernels::attention {

struct RopeFrequencies {
  std::vector<float> inv_freq;  // head_dim / 2 entries; pair (j, j + head_dim/2) rotates by pos * inv_freq[j]
  float concentration = 1.0f;   // multiplies both cos and sin
};

inline RopeFrequencies yarn_inv_freq(const model::RopeConfig& rope, int64_t head_dim) {
  const int64_t half = head_dim / 2;
  const double theta = rope.theta;
  RopeFrequencies r;
  r.inv_freq.resize(size_t(half));
  const bool yarn = rope.yarn && rope.factor > 1.0;
  double low = 0, high = 0;
  if (yarn) {
    const double two_pi = 2.0 * std::numbers::pi;
    const double l0 = double(rope.original_max_position);
    auto correction_dim = [&](double rotations) {
      return double(head_dim) * std::log(l0 / (rotations * two_pi)) / (2.0 * std::log(theta));
    };
    low = correction_dim(rope.beta_fast);
    high = correction_dim(rope.beta_slow);
    if (rope.truncate) {
      low = std::floor(low);
      high = std::ceil(high);
    }
    low = std::max(low, 0.0);
    high = std::min(high, double(head_dim - 1));
    if (low == high) high += 0.001;  // as the reference: avoid a zero-width ramp
    r.concentration = float(0.1 * std::log(rope.factor) + 1.0);
  }
  for (int64_t i = 0; i < half; ++i) {
    const double freq = std::pow(theta, double(2 * i) / double(head_dim));
    double inv = 1.0 / freq;
    if (yarn) {
      const double ramp = std::clamp((double(i) - low) / (high - low), 0.0, 1.0);
      inv = ramp / (rope.factor * freq) + (1.0 - ramp) / freq;
    }
    r.inv_freq[size_t(i)] = float(inv);
  }
  return r;
}

inline RopeFrequencies yarn_inv_freq(const model::ModelConfig& config) {
  return yarn_inv_freq(config.rope, config.head_dim);
}

}  // namespace orchid::kernels::attention
