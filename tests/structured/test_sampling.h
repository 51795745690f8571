// Drives a TokenConstraint the way the engine does, with a stand-in for a random-weight model: each token is
// drawn uniformly among those the mask allows (a fixed-seed generator), `remaining` counts down from the
// budget, and the run stops at the end token or when the budget is spent.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "engine/token_constraint.h"

namespace orchid::structured::testing {

inline std::vector<int32_t> allowed_ids(const std::vector<uint32_t>& mask) {
  std::vector<int32_t> ids;
  for (size_t w = 0; w < mask.size(); ++w)
    for (uint32_t bits = mask[w]; bits; bits &= bits - 1)
      ids.push_back(int32_t(w * 32 + __builtin_ctz(bits)));
  return ids;
}

// The tokens drawn, the end token included when it was reached.
inline std::vector<int32_t> run_random(engine::TokenConstraint& c, int32_t words, int32_t budget,
                                       int32_t end_token, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> out;
  std::vector<uint32_t> mask(static_cast<size_t>(words));
  for (int32_t remaining = budget; remaining > 0; --remaining) {
    c.fill_mask(mask, remaining);
    const std::vector<int32_t> ids = allowed_ids(mask);
    if (ids.empty()) {
      ADD_FAILURE() << "empty mask after " << out.size() << " tokens";
      return out;
    }
    const int32_t t = ids[std::uniform_int_distribution<size_t>(0, ids.size() - 1)(rng)];
    EXPECT_TRUE(c.accept(t)) << "token " << t << " from the mask was refused";
    out.push_back(t);
    if (t == end_token) break;
  }
  return out;
}

}  // namespace orchid::structured::testing
