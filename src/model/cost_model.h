// Napkin math for gpt-oss: FLOPs of a prefill and bytes of a decode step, the floors every benchmark prints
// next to its measurement (see ../shared/specs/hopper.md, "Floors").
#pragma once

#include <cstdint>
#include <string_view>

#include "model/config.h"

namespace orchid::model {

struct HardwareCeilings {
  double bf16_flops = 742e12;        // dense BF16 GEMM, measured on an H200 (cuBLAS 8192^3)
  double fp8_flops = 1332e12;        // FP8 e4m3 GEMM, measured on an H200
  double hbm_bytes_per_s = 4.17e12;  // device-to-device copy, bytes read + written
};

// Parameters multiplied per token in the linear layers (attention projections, router, k experts), without
// the embedding lookup and the unembedding.
int64_t linear_params_per_token(const ModelConfig& c);

// FLOPs of a prefill of n tokens of one sequence starting at position 0.
struct PrefillFlops {
  double linear = 0;     // 2 * linear_params_per_token * n
  double attention = 0;  // QK^T and PV over the allowed keys (causal, windowed on sliding layers)
  double lm_head = 0;    // last position only
};
PrefillFlops prefill_flops(const ModelConfig& c, int64_t n);

// Seconds at the ceilings: linear layers at the expert format's rate (FP8 for fp8/mxfp4 experts, BF16 for
// bf16), attention at the BF16 rate.
double prefill_floor_seconds(const ModelConfig& c, int64_t n, std::string_view weights,
                             const HardwareCeilings& hw);

// Bytes one decode step must read from HBM: every non-expert weight once, the distinct experts that B tokens
// route to (expected value under uniform routing), and each sequence's KV cache at context length L.
double decode_step_bytes(const ModelConfig& c, int64_t batch, int64_t context, std::string_view weights);
double decode_floor_seconds(const ModelConfig& c, int64_t batch, int64_t context, std::string_view weights,
                            const HardwareCeilings& hw);

// $ per 1M tokens when `seconds` of `gpus` GPUs at `usd_per_gpu_hour` produce `tokens` tokens.
inline double usd_per_million_tokens(double seconds, int64_t tokens, int gpus,
                                     double usd_per_gpu_hour = 3.0) {
  return seconds * gpus * usd_per_gpu_hour / 3600.0 / double(tokens) * 1e6;
}

}  // namespace orchid::model
