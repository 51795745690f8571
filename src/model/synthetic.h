// Synthetic gpt-oss weights: the shapes of a preset with deterministic random values, the same whether made
// in memory (`synthetic:PRESET[@seed]`), written to disk (`orchid synth`) or generated on a GPU.
//
// Element i of a tensor is a pure function of (tensor key, i), key = XXH64(name, seed): a counter-based hash
// (splitmix64 of key + i * golden ratio) that any device can evaluate in any order. Floats use exactly
// representable steps only (see synthetic.cc), so CPU and GPU produce identical bits.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/dtypes.h"
#include "io/checkpoint.h"
#include "model/config.h"
#include "model/manifest.h"

namespace orchid::model {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t synthetic_tensor_key(std::string_view name, uint64_t seed);

// How a tensor's values are drawn: normal(mean, std) approximated by a sum of four uniforms, uniform bytes
// (MXFP4 blocks) or E8M0 scales around 2^-7.
struct SyntheticDistribution {
  enum Kind : uint8_t { kNormal, kBytes, kScales } kind = kNormal;
  float mean = 0.0f;
  float std = 0.02f;
};
SyntheticDistribution synthetic_distribution(TensorRole role);

// Fills elements [begin, begin + count) of the tensor (`out` points at element `begin`), in `dtype`
// (BF16 or F32 for float tensors, U8 for blocks and scales).
void fill_synthetic(const TensorSpec& spec, uint64_t seed, DType dtype, int64_t begin, int64_t count,
                    void* out);

// Every manifest tensor, in memory (float tensors in BF16, as the official checkpoints).
io::Checkpoint synthetic_checkpoint(const ModelConfig& c, uint64_t seed);

}  // namespace orchid::model
