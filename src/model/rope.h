// YaRN ("NTK-by-parts") rotary embedding parameters for gpt-oss, computed once on the host and shared by
// every backend. Half-split (NeoX) layout: dims (j, j + head_dim/2) rotate together with inv_freq[j].
#pragma once

#include <vector>

#include "model/config.h"

namespace orchid::model {

struct RopeTables {
  std::vector<float> inv_freq;  // head_dim / 2 entries
  float concentration = 1.0f;   // multiplies cos and sin (so q.k logits carry concentration^2)
};

// Computed in double and rounded once to float. gpt-oss: truncate=false, correction range from
// original_max_position (4096), concentration = 0.1 * ln(factor) + 1.
RopeTables rope_tables(const RopeConfig& rope, int64_t head_dim);

// cos/sin of one (position, j) pair as every backend must compute them: angle = float(pos) * inv_freq[j]
// rounded to fp32 (the reference's fp32 product), then cos/sin of that fp32 angle, times the concentration.
void rope_cos_sin(const RopeTables& t, int64_t pos, int64_t j, float* cos_out, float* sin_out);

}  // namespace orchid::model
