#include "model/cost_model.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "model/manifest.h"

namespace orchid::model {

int64_t linear_params_per_token(const ModelConfig& c) {
  const int64_t H = c.hidden_size, I = c.intermediate_size;
  const int64_t attention = H * (c.q_dim() + 2 * c.kv_dim()) + c.q_dim() * H;
  const int64_t router = c.num_experts * H;
  const int64_t experts = c.experts_per_token * (2 * I * H + H * I);
  return c.num_layers * (attention + router + experts);
}

PrefillFlops prefill_flops(const ModelConfig& c, int64_t n) {
  PrefillFlops f;
  f.linear = 2.0 * double(linear_params_per_token(c)) * double(n);
  const double per_key = 4.0 * double(c.head_dim) * double(c.num_heads);  // QK^T and PV, 2 FLOPs per MAC
  for (int64_t l = 0; l < c.num_layers; ++l) {
    double keys;
    if (c.is_sliding(l) && c.sliding_window > 0) {
      const double w = double(c.sliding_window), m = double(std::min(n, c.sliding_window));
      keys = m * (m + 1) / 2 + double(n - int64_t(m)) * w;  // ramp to the window, then w keys each
    } else {
      keys = double(n) * double(n + 1) / 2;
    }
    f.attention += per_key * keys;
  }
  f.lm_head = 2.0 * double(c.vocab_size) * double(c.hidden_size);
  return f;
}

double prefill_floor_seconds(const ModelConfig& c, int64_t n, std::string_view weights,
                             const HardwareCeilings& hw) {
  const auto f = prefill_flops(c, n);
  const double linear_rate = weights == "bf16" ? hw.bf16_flops : hw.fp8_flops;
  return f.linear / linear_rate + (f.attention + f.lm_head) / hw.bf16_flops;
}

namespace {
double expert_bytes(const ModelConfig& c, std::string_view weights) {
  const double params = 3.0 * double(c.hidden_size) * double(c.intermediate_size);
  const double bias = 2.0 * (2.0 * double(c.intermediate_size) + double(c.hidden_size));
  if (weights == "bf16") return 2.0 * params + bias;
  if (weights == "fp8") return params + 4.0 * params / (128.0 * 128.0) + bias;
  if (weights == "mxfp4") return params / 2.0 + params / 32.0 + bias;
  fail("unknown weight format '{}' (expected bf16, fp8 or mxfp4)", weights);
}
}  // namespace

double decode_step_bytes(const ModelConfig& c, int64_t batch, int64_t context, std::string_view weights) {
  double non_expert = 0;
  for (const auto& s : gpt_oss_manifest(c)) {
    if (is_expert_weight(s.role) || s.role == TensorRole::kEmbedding || s.role == TensorRole::kGateUpBias ||
        s.role == TensorRole::kDownBias)
      continue;
    double n = 1;
    for (int64_t d : s.shape) n *= double(d);
    non_expert += 2.0 * n;
  }
  const double e = double(c.num_experts), k = double(c.experts_per_token);
  const double distinct = e * (1.0 - std::pow(1.0 - k / e, double(batch)));
  const double experts = double(c.num_layers) * distinct * expert_bytes(c, weights);
  const double kv_token = 2.0 * double(c.kv_dim()) * 2.0;  // K and V, BF16, one layer
  const double kv = double(batch) * kv_token *
                    (double(c.num_full_layers()) * double(context) +
                     double(c.num_sliding_layers()) * double(std::min(context, c.sliding_window)));
  return non_expert + experts + kv;
}

double decode_floor_seconds(const ModelConfig& c, int64_t batch, int64_t context, std::string_view weights,
                            const HardwareCeilings& hw) {
  const double bytes_s = decode_step_bytes(c, batch, context, weights) / hw.hbm_bytes_per_s;
  const double flops =
      2.0 * double(linear_params_per_token(c) + c.vocab_size * c.hidden_size) * double(batch) +
      4.0 * double(c.head_dim) * double(c.num_heads) * double(batch) * double(context) *
          double(c.num_full_layers());
  const double flops_s = flops / (weights == "bf16" ? hw.bf16_flops : hw.fp8_flops);
  return std::max(bytes_s, flops_s);
}

}  // namespace orchid::model
