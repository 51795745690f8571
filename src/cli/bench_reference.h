// Published figures orchid's benchmarks are compared with (../shared/specs/hopper.md): the seed's prefill
// table (Perplexity ROSE, FP8 128x128 blocks, H200, batch 1, EP1 DP1 TP1 rows) and the peer measured on the
// same H200 (transformers 5.17 + FlexAttention, BF16, gpt-oss-20b shapes).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace orchid::cli {

struct PrefillReference {
  int64_t tokens;
  double seed_20b_s, seed_120b_s, peer_20b_s;
};

inline constexpr PrefillReference kPrefillReference[] = {
    {8192, 0.239, 0.364, 0.229},
    {32768, 1.610, 2.421, 1.132},
    {65536, 4.895, 7.375, 2.919},
    {128000, 16.037, 23.902, 8.22},
};

// The reference cell for a model of `num_experts` experts (32: 20b, 128: 120b) at `tokens`, if published.
inline std::optional<double> seed_prefill_seconds(int64_t num_experts, int64_t tokens) {
  for (const auto& r : kPrefillReference)
    if (r.tokens == tokens) {
      if (num_experts == 32) return r.seed_20b_s;
      if (num_experts == 128) return r.seed_120b_s;
    }
  return std::nullopt;
}
inline std::optional<double> peer_prefill_seconds(int64_t num_experts, int64_t tokens) {
  for (const auto& r : kPrefillReference)
    if (r.tokens == tokens && num_experts == 32) return r.peer_20b_s;
  return std::nullopt;
}

}  // namespace orchid::cli
