// ModelConfig: the gpt-oss architecture hyper-parameters, read from a Hugging Face config.json in either
// transformers style (4.55+: `rope_scaling` + top-level `rope_theta`; 5.x: `rope_parameters` holding
// `rope_theta`), or taken from a named preset (tiny, 20b, 120b).
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace orchid::model {

enum class LayerType : uint8_t { kSliding, kFull };

struct RopeConfig {
  double theta = 150000.0;
  bool yarn = true;         // rope_type "yarn"; false = plain RoPE ("default")
  double factor = 32.0;     // YaRN scaling factor
  double beta_fast = 32.0;  // high-frequency boundary (gpt-oss ntk_beta)
  double beta_slow = 1.0;   // low-frequency boundary (gpt-oss ntk_alpha)
  int64_t original_max_position = 4096;
  bool truncate = false;  // gpt-oss: false (non-integer correction range)
};

// RoPE settings of a config.json (rope_parameters, or rope_scaling with a top-level rope_theta): plain RoPE
// or YaRN; throws orchid::Error naming `source`.
RopeConfig parse_rope_config(const nlohmann::json& j, std::string_view source);

// Which transformers version's config.json layout to write (both are read).
enum class ConfigStyle { kTransformers4, kTransformers5 };

struct ModelConfig {
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;
  int64_t num_experts = 0;
  int64_t experts_per_token = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t vocab_size = 0;
  int64_t sliding_window = 0;
  std::vector<LayerType> layer_types;
  RopeConfig rope;
  double swiglu_limit = 7.0;
  double swiglu_alpha = 1.702;
  double rms_norm_eps = 1e-5;
  int64_t max_position_embeddings = 131072;
  bool tie_word_embeddings = false;
  bool experts_mxfp4 = true;  // quantization_config.quant_method == "mxfp4"
  // Ids that end a generation: config.json's eos_token_id, then generation_config.json's (the published
  // gpt-oss checkpoints list <|return|>, <|endoftext|> and <|call|> there, and transformers and vLLM stop on
  // each of them).
  std::vector<int64_t> eos_token_ids;
  int64_t pad_token_id = -1;
  std::string name;  // preset name or source path, for messages

  int64_t q_dim() const { return num_heads * head_dim; }
  int64_t kv_dim() const { return num_kv_heads * head_dim; }
  bool is_sliding(int64_t layer) const { return layer_types[size_t(layer)] == LayerType::kSliding; }
  int64_t num_full_layers() const;
  int64_t num_sliding_layers() const { return num_layers - num_full_layers(); }

  // Throws orchid::Error naming `source` and the field for anything missing or inconsistent.
  static ModelConfig from_json(const nlohmann::json& j, std::string_view source);
  static ModelConfig from_file(const std::string& path);
  // Adds generation_config.json's eos_token_id (an integer or a list) to eos_token_ids; throws orchid::Error
  // naming `source` for a malformed or out-of-vocabulary id.
  void merge_generation_config(const nlohmann::json& j, std::string_view source);
  nlohmann::json to_json(ConfigStyle style) const;
  void validate(std::string_view source) const;
};

// Named shapes: "tiny" (tests, demos), "20b", "120b". Unknown names are a user error.
ModelConfig preset_config(std::string_view name);
std::vector<std::string> preset_names();

}  // namespace orchid::model
