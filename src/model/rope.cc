#include "model/rope.h"

#include <algorithm>
#include <cmath>

namespace orchid::model {

RopeTables rope_tables(const RopeConfig& rope, int64_t head_dim) {
  RopeTables t;
  const int64_t half = head_dim / 2;
  t.inv_freq.resize(size_t(half));
  const double base = rope.theta;
  if (!rope.yarn) {
    for (int64_t i = 0; i < half; ++i)
      t.inv_freq[size_t(i)] = float(1.0 / std::pow(base, double(2 * i) / double(head_dim)));
    t.concentration = 1.0f;
    return t;
  }
  const double factor = rope.factor;
  const double orig = double(rope.original_max_position);
  // Dimension index whose wavelength completes `rotations` turns over the original context.
  auto correction_dim = [&](double rotations) {
    return double(head_dim) * std::log(orig / (rotations * 2.0 * M_PI)) / (2.0 * std::log(base));
  };
  double low = correction_dim(rope.beta_fast);
  double high = correction_dim(rope.beta_slow);
  if (rope.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, double(head_dim - 1));
  if (low == high) high += 0.001;  // avoid a zero-width ramp, as the reference does
  for (int64_t i = 0; i < half; ++i) {
    const double freq = std::pow(base, double(2 * i) / double(head_dim));
    const double ramp = std::clamp((double(i) - low) / (high - low), 0.0, 1.0);
    const double extrapolation_weight = 1.0 - ramp;  // high-frequency dims keep the original frequency
    const double inv =
        (1.0 / (factor * freq)) * (1.0 - extrapolation_weight) + (1.0 / freq) * extrapolation_weight;
    t.inv_freq[size_t(i)] = float(inv);
  }
  t.concentration = float(0.1 * std::log(factor) + 1.0);
  return t;
}

void rope_cos_sin(const RopeTables& t, int64_t pos, int64_t j, float* cos_out, float* sin_out) {
  const float angle = float(pos) * t.inv_freq[size_t(j)];
  *cos_out = float(std::cos(double(angle))) * t.concentration;
  *sin_out = float(std::sin(double(angle))) * t.concentration;
}

}  // namespace orchid::model
