// YaRN rotary tables for the RoPE kernel: the model layer's host computation (model/rope.h, checked against
// transformers), under the name the attention code uses. The kernel takes them by value (RopeTable in
// rope_kv_write.h) and the CPU references use the same tables, so GPU and CPU rotate by identical
// frequencies.
#pragma once

#include <cstdint>

#include "model/config.h"
#include "model/rope.h"

namespace orchid::kernels::attention {

using RopeFrequencies = model::RopeTables;  // inv_freq[head_dim / 2], concentration

inline RopeFrequencies yarn_inv_freq(const model::RopeConfig& rope, int64_t head_dim) {
  return model::rope_tables(rope, head_dim);
}

inline RopeFrequencies yarn_inv_freq(const model::ModelConfig& config) {
  return model::rope_tables(config.rope, config.head_dim);
}

}  // namespace orchid::kernels::attention
