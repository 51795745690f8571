// Writes a synthetic gpt-oss checkpoint in the Hugging Face layout: config.json (either transformers style),
// generation_config.json, shards named model-0000k-of-0000n.safetensors in manifest order, and the index.
// Tensor bytes are generated shard by shard, so a 120b checkpoint needs no more memory than one tensor.
#pragma once

#include <cstdint>
#include <string>

#include "model/config.h"

namespace orchid::model {

struct SyntheticWriteOptions {
  uint64_t seed = 0;
  ConfigStyle style = ConfigStyle::kTransformers4;
  uint64_t max_shard_bytes = 5'000'000'000ull;
  bool sparse = false;  // leave tensor data as file holes (valid headers, zero bytes): for load-time tests
};

// Returns the total tensor bytes. `dir` must not exist or be empty.
uint64_t write_synthetic_checkpoint(const std::string& dir, const ModelConfig& c,
                                    const SyntheticWriteOptions& o);

}  // namespace orchid::model
