// Resolves a MODEL argument: a Hugging Face directory or `synthetic:PRESET[@seed]`.
#pragma once

#include <cstdint>
#include <string>

#include "io/checkpoint.h"
#include "model/config.h"
#include "model/manifest.h"

namespace orchid::model {

struct ModelRef {
  bool synthetic = false;
  std::string preset;  // synthetic only
  uint64_t seed = 0;   // synthetic only
  std::string dir;     // directory only
};
ModelRef parse_model_ref(const std::string& arg);  // errors name the argument

// Maps a model directory's shards, rebuilds tensors stored as rows (model/packed_rows.h) and validates them
// against the manifest.
io::Checkpoint open_checkpoint(const std::string& dir, const std::vector<TensorSpec>& manifest);

// Config only (fast: reads config.json, or the preset).
ModelConfig load_config(const ModelRef& ref);

struct LoadedModel {
  ModelConfig config;
  io::Checkpoint checkpoint;  // validated against the manifest
};
// Maps a directory's shards (no tensor data read) or makes synthetic weights in memory.
LoadedModel load_model(const std::string& arg);

}  // namespace orchid::model
