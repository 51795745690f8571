// The gpt-oss weight manifest: every tensor a checkpoint must hold (Hugging Face names), with its shape,
// accepted dtypes and role. It drives validation, loading, conversion, sharding and `orchid inspect`.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtypes.h"
#include "io/checkpoint.h"
#include "model/config.h"

namespace orchid::model {

enum class TensorRole : uint8_t {
  kEmbedding,
  kInputNorm,
  kQProj,
  kQBias,
  kKProj,
  kKBias,
  kVProj,
  kVBias,
  kOProj,
  kOBias,
  kSinks,
  kPostNorm,
  kRouter,
  kRouterBias,
  kGateUpBlocks,
  kGateUpScales,  // MXFP4 experts: [E, 2I, H/32, 16] u8 and [E, 2I, H/32] e8m0
  kDownBlocks,
  kDownScales,  //                 [E, H, I/32, 16] and [E, H, I/32]
  kGateUpWeight,
  kDownWeight,  // dense experts as transformers stores them: [E, H, 2I] and [E, I, H]
  kGateUpBias,
  kDownBias,
  kFinalNorm,
  kLmHead,
};
std::string_view role_name(TensorRole r);
bool is_expert_weight(TensorRole r);  // the tensors whose format --weights chooses

struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<DType> dtypes;  // accepted, preferred first
  TensorRole role;
  int layer = -1;  // -1: not per layer
};

std::vector<TensorSpec> gpt_oss_manifest(const ModelConfig& c);

// Checks that every manifest tensor is present with its shape and an accepted dtype; errors name the tensor,
// what was expected and the file it was found in.
void validate_checkpoint(const io::Checkpoint& ck, const std::vector<TensorSpec>& manifest);

// Bytes of all weights when experts are stored as `format` ("bf16", "fp8" with fp32 128x128 block scales,
// "mxfp4"); everything else in BF16.
uint64_t weight_bytes(const ModelConfig& c, std::string_view format);
// The expert part of weight_bytes (all layers).
uint64_t expert_weight_bytes(const ModelConfig& c, std::string_view format);

}  // namespace orchid::model
