#include "model/manifest.h"

#include <fmt/format.h>

#include "core/error.h"

namespace orchid::model {

std::string_view role_name(TensorRole r) {
  static constexpr std::string_view kNames[] = {
      "embedding",      "input_norm",  "q_proj",         "q_bias",         "k_proj",      "k_bias",
      "v_proj",         "v_bias",      "o_proj",         "o_bias",         "sinks",       "post_norm",
      "router",         "router_bias", "gate_up_blocks", "gate_up_scales", "down_blocks", "down_scales",
      "gate_up_weight", "down_weight", "gate_up_bias",   "down_bias",      "final_norm",  "lm_head"};
  return kNames[size_t(r)];
}

bool is_expert_weight(TensorRole r) {
  switch (r) {
    case TensorRole::kGateUpBlocks:
    case TensorRole::kGateUpScales:
    case TensorRole::kDownBlocks:
    case TensorRole::kDownScales:
    case TensorRole::kGateUpWeight:
    case TensorRole::kDownWeight:
      return true;
    default:
      return false;
  }
}

std::vector<TensorSpec> gpt_oss_manifest(const ModelConfig& c) {
  const std::vector<DType> kFloat = {DType::kBF16, DType::kF32, DType::kF16};
  const std::vector<DType> kByte = {DType::kU8};
  const int64_t H = c.hidden_size, I = c.intermediate_size, E = c.num_experts;
  std::vector<TensorSpec> m;
  m.push_back({"model.embed_tokens.weight", {c.vocab_size, H}, kFloat, TensorRole::kEmbedding});
  for (int l = 0; l < int(c.num_layers); ++l) {
    const std::string p = fmt::format("model.layers.{}.", l);
    auto add = [&](std::string suffix, std::vector<int64_t> shape, const std::vector<DType>& dt,
                   TensorRole r) {
      m.push_back({p + suffix, std::move(shape), dt, r, l});
    };
    add("input_layernorm.weight", {H}, kFloat, TensorRole::kInputNorm);
    add("self_attn.q_proj.weight", {c.q_dim(), H}, kFloat, TensorRole::kQProj);
    add("self_attn.q_proj.bias", {c.q_dim()}, kFloat, TensorRole::kQBias);
    add("self_attn.k_proj.weight", {c.kv_dim(), H}, kFloat, TensorRole::kKProj);
    add("self_attn.k_proj.bias", {c.kv_dim()}, kFloat, TensorRole::kKBias);
    add("self_attn.v_proj.weight", {c.kv_dim(), H}, kFloat, TensorRole::kVProj);
    add("self_attn.v_proj.bias", {c.kv_dim()}, kFloat, TensorRole::kVBias);
    add("self_attn.o_proj.weight", {H, c.q_dim()}, kFloat, TensorRole::kOProj);
    add("self_attn.o_proj.bias", {H}, kFloat, TensorRole::kOBias);
    add("self_attn.sinks", {c.num_heads}, kFloat, TensorRole::kSinks);
    add("post_attention_layernorm.weight", {H}, kFloat, TensorRole::kPostNorm);
    add("mlp.router.weight", {E, H}, kFloat, TensorRole::kRouter);
    add("mlp.router.bias", {E}, kFloat, TensorRole::kRouterBias);
    if (c.experts_mxfp4) {
      add("mlp.experts.gate_up_proj_blocks", {E, 2 * I, H / 32, 16}, kByte, TensorRole::kGateUpBlocks);
      add("mlp.experts.gate_up_proj_scales", {E, 2 * I, H / 32}, kByte, TensorRole::kGateUpScales);
      add("mlp.experts.down_proj_blocks", {E, H, I / 32, 16}, kByte, TensorRole::kDownBlocks);
      add("mlp.experts.down_proj_scales", {E, H, I / 32}, kByte, TensorRole::kDownScales);
    } else {
      add("mlp.experts.gate_up_proj", {E, H, 2 * I}, kFloat, TensorRole::kGateUpWeight);
      add("mlp.experts.down_proj", {E, I, H}, kFloat, TensorRole::kDownWeight);
    }
    add("mlp.experts.gate_up_proj_bias", {E, 2 * I}, kFloat, TensorRole::kGateUpBias);
    add("mlp.experts.down_proj_bias", {E, H}, kFloat, TensorRole::kDownBias);
  }
  m.push_back({"model.norm.weight", {H}, kFloat, TensorRole::kFinalNorm});
  if (!c.tie_word_embeddings) m.push_back({"lm_head.weight", {c.vocab_size, H}, kFloat, TensorRole::kLmHead});
  return m;
}

void validate_checkpoint(const io::Checkpoint& ck, const std::vector<TensorSpec>& manifest) {
  for (const auto& spec : manifest) {
    if (!ck.has(spec.name))
      fail("{}: missing tensor '{}' (expected shape {})", ck.where(), spec.name, io::shape_str(spec.shape));
    const auto& t = ck.get(spec.name);
    if (t.shape != spec.shape)
      fail("{}: tensor '{}' has shape {}, expected {}", t.source, spec.name, io::shape_str(t.shape),
           io::shape_str(spec.shape));
    bool ok = false;
    for (DType d : spec.dtypes) ok |= d == t.dtype;
    if (!ok) {
      std::string accepted;
      for (DType d : spec.dtypes) accepted += (accepted.empty() ? "" : " or ") + std::string(dtype_name(d));
      fail("{}: tensor '{}' has dtype {}, expected {}", t.source, spec.name, dtype_name(t.dtype), accepted);
    }
  }
}

uint64_t expert_weight_bytes(const ModelConfig& c, std::string_view format) {
  const uint64_t expert_params =
      uint64_t(c.num_experts) * 3 * c.hidden_size * c.intermediate_size;  // per layer
  uint64_t experts;
  if (format == "bf16") {
    experts = 2 * expert_params;
  } else if (format == "fp8") {
    // 1 byte per weight plus one fp32 scale per 128x128 block of each expert matrix.
    auto blocks = [](uint64_t rows, uint64_t cols) { return ((rows + 127) / 128) * ((cols + 127) / 128); };
    uint64_t per_expert =
        blocks(2 * c.intermediate_size, c.hidden_size) + blocks(c.hidden_size, c.intermediate_size);
    experts = expert_params + 4 * per_expert * uint64_t(c.num_experts);
  } else if (format == "mxfp4") {
    experts = expert_params / 2 + expert_params / 32;  // 4 bits per weight + one byte per 32
  } else {
    fail("unknown weight format '{}' (expected bf16, fp8 or mxfp4)", format);
  }
  return experts * uint64_t(c.num_layers);
}

uint64_t weight_bytes(const ModelConfig& c, std::string_view format) {
  uint64_t total = 0;
  for (const auto& s : gpt_oss_manifest(c)) {
    if (is_expert_weight(s.role)) continue;
    uint64_t n = 1;
    for (int64_t d : s.shape) n *= uint64_t(d);
    total += 2 * n;
  }
  return total + expert_weight_bytes(c, format);
}

}  // namespace orchid::model
