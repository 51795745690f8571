#include "model/config.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace orchid::model {
namespace {

using nlohmann::json;

// The published gpt-oss-20b config.json (transformers 4.57 style), as quoted in the model spec.
json config_20b_v4() {
  return json::parse(R"({
    "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "hidden_size": 2880,
    "intermediate_size": 2880, "num_hidden_layers": 24, "num_local_experts": 32, "num_experts_per_tok": 4,
    "experts_per_token": 4, "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64,
    "vocab_size": 201088, "max_position_embeddings": 131072, "initial_context_length": 4096,
    "rope_theta": 150000, "rope_scaling": {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0,
    "beta_slow": 1.0, "original_max_position_embeddings": 4096, "truncate": false},
    "sliding_window": 128, "layer_types": ["sliding_attention", "full_attention", "sliding_attention",
    "full_attention", "sliding_attention", "full_attention", "sliding_attention", "full_attention",
    "sliding_attention", "full_attention", "sliding_attention", "full_attention", "sliding_attention",
    "full_attention", "sliding_attention", "full_attention", "sliding_attention", "full_attention",
    "sliding_attention", "full_attention", "sliding_attention", "full_attention", "sliding_attention",
    "full_attention"], "swiglu_limit": 7.0, "rms_norm_eps": 1e-05, "attention_bias": true,
    "eos_token_id": 200002, "pad_token_id": 199999, "tie_word_embeddings": false,
    "quantization_config": {"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn",
    "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}})");
}

TEST(ModelConfig, Reads20bTransformers4Style) {
  auto c = ModelConfig::from_json(config_20b_v4(), "config.json");
  EXPECT_EQ(c.hidden_size, 2880);
  EXPECT_EQ(c.num_layers, 24);
  EXPECT_EQ(c.num_experts, 32);
  EXPECT_EQ(c.q_dim(), 4096);
  EXPECT_EQ(c.kv_dim(), 512);
  EXPECT_TRUE(c.is_sliding(0));
  EXPECT_FALSE(c.is_sliding(1));
  EXPECT_EQ(c.num_full_layers(), 12);
  EXPECT_TRUE(c.rope.yarn);
  EXPECT_DOUBLE_EQ(c.rope.theta, 150000);
  EXPECT_DOUBLE_EQ(c.rope.factor, 32);
  EXPECT_FALSE(c.rope.truncate);
  EXPECT_TRUE(c.experts_mxfp4);
  EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{200002});
}

// The published generation_config.json of gpt-oss-20b lists three eos ids; generation stops on each, as in
// transformers and vLLM.
TEST(ModelConfig, GenerationConfigAddsItsEosIds) {
  auto c = ModelConfig::from_json(config_20b_v4(), "config.json");
  c.merge_generation_config(
      json::parse(R"({"bos_token_id": 199998, "do_sample": true, "eos_token_id": [200002, 199999, 200012],
                      "pad_token_id": 199999, "transformers_version": "4.55.0.dev0"})"),
      "generation_config.json");
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{200002, 199999, 200012}));
  c.merge_generation_config(json::parse(R"({"eos_token_id": 200012})"), "g");  // no duplicates
  EXPECT_EQ(c.eos_token_ids.size(), 3u);
  c.merge_generation_config(json::parse(R"({"temperature": 1.0})"), "g");  // none given: unchanged
  EXPECT_EQ(c.eos_token_ids.size(), 3u);
  EXPECT_THROW(c.merge_generation_config(json::parse(R"({"eos_token_id": 300000})"), "g"), Error);
  EXPECT_THROW(c.merge_generation_config(json::parse(R"({"eos_token_id": "x"})"), "g"), Error);
  EXPECT_THROW(c.merge_generation_config(json::parse(R"({"eos_token_id": [1, "x"]})"), "g"), Error);
  EXPECT_THROW(c.merge_generation_config(json::parse("[1]"), "g"), Error);
}

TEST(ModelConfig, Transformers5StyleGivesTheSameConfig) {
  json j = config_20b_v4();
  json rp = j["rope_scaling"];
  rp["rope_theta"] = j["rope_theta"];
  j.erase("rope_scaling");
  j.erase("rope_theta");
  j["rope_parameters"] = rp;
  j["swiglu_alpha"] = 1.702;
  auto a = ModelConfig::from_json(config_20b_v4(), "a");
  auto b = ModelConfig::from_json(j, "b");
  EXPECT_EQ(a.to_json(ConfigStyle::kTransformers5), b.to_json(ConfigStyle::kTransformers5));
}

TEST(ModelConfig, WritesBothStylesAndReadsThemBack) {
  for (auto name : preset_names()) {
    auto c = preset_config(name);
    for (auto style : {ConfigStyle::kTransformers4, ConfigStyle::kTransformers5}) {
      json j = c.to_json(style);
      EXPECT_EQ(style == ConfigStyle::kTransformers5, j.contains("rope_parameters"));
      auto back = ModelConfig::from_json(j, "x");
      EXPECT_EQ(back.to_json(ConfigStyle::kTransformers4), c.to_json(ConfigStyle::kTransformers4)) << name;
    }
  }
}

TEST(ModelConfig, ExpertsPerTokenAlias) {
  json j = config_20b_v4();
  j.erase("num_experts_per_tok");
  EXPECT_EQ(ModelConfig::from_json(j, "x").experts_per_token, 4);
  j.erase("experts_per_token");
  EXPECT_THROW(ModelConfig::from_json(j, "x"), Error);
}

void expect_error_mentions(const json& j, const std::string& word) {
  try {
    ModelConfig::from_json(j, "cfg.json");
    ADD_FAILURE() << "no error for " << word;
  } catch (const Error& e) {
    std::string w = e.what();
    EXPECT_NE(w.find(word), std::string::npos) << w;
    EXPECT_NE(w.find("cfg.json"), std::string::npos) << w;
  }
}

TEST(ModelConfig, ClearErrors) {
  json j = config_20b_v4();
  j.erase("hidden_size");
  expect_error_mentions(j, "hidden_size");

  j = config_20b_v4();
  j["num_key_value_heads"] = 7;
  expect_error_mentions(j, "num_key_value_heads");

  j = config_20b_v4();
  j["layer_types"].erase(0);
  expect_error_mentions(j, "layer_types");

  j = config_20b_v4();
  j["layer_types"][3] = "local";
  expect_error_mentions(j, "layer_types[3]");

  j = config_20b_v4();
  j.erase("rope_theta");
  expect_error_mentions(j, "rope_theta");

  j = config_20b_v4();
  j["rope_scaling"]["rope_type"] = "longrope";
  expect_error_mentions(j, "longrope");

  j = config_20b_v4();
  j["quantization_config"]["quant_method"] = "gptq";
  expect_error_mentions(j, "gptq");

  j = config_20b_v4();
  j["hidden_size"] = "big";
  expect_error_mentions(j, "hidden_size");

  j = config_20b_v4();
  j["num_experts_per_tok"] = 64;
  expect_error_mentions(j, "num_experts_per_tok");

  j = config_20b_v4();
  j["model_type"] = "llama";
  expect_error_mentions(j, "llama");

  expect_error_mentions(json::array(), "object");
}

TEST(ModelConfig, Presets) {
  auto t = preset_config("tiny");
  EXPECT_EQ(t.vocab_size, 201088);
  EXPECT_GT(t.num_full_layers(), 0);
  EXPECT_GT(t.num_sliding_layers(), 0);
  auto big = preset_config("120b");
  EXPECT_EQ(big.num_experts, 128);
  EXPECT_EQ(big.num_layers, 36);
  EXPECT_THROW(preset_config("7b"), Error);
}

}  // namespace
}  // namespace orchid::model
