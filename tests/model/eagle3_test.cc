// EAGLE-3 head configs and checkpoints: the published config keys (aux ids at the top level or under
// eagle_config, vLLM's default ids, Llama's default RoPE), the tensor names of the public heads
// (midlayer.* and layers.0.*, with or without model.), d2t, and clear errors for heads that do not fit the
// target.
#include "model/eagle3.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/safetensors.h"
#include "model/loader.h"

namespace orchid::model {
namespace {

ModelConfig tiny() {
  return load_config(parse_model_ref("synthetic:tiny"));
}

nlohmann::json head_json(const ModelConfig& t) {
  return {{"architectures", {"LlamaForCausalLMEagle3"}},
          {"model_type", "llama"},
          {"hidden_size", t.hidden_size},
          {"intermediate_size", 3 * t.hidden_size},
          {"num_attention_heads", t.num_heads},
          {"num_key_value_heads", t.num_kv_heads},
          {"head_dim", t.head_dim},
          {"num_hidden_layers", 1},
          {"vocab_size", t.vocab_size},
          {"draft_vocab_size", 1000},
          {"rms_norm_eps", 1e-5},
          {"max_position_embeddings", 4096},
          {"eagle_config", {{"eagle_aux_hidden_state_layer_ids", {0, 1, t.num_layers}}}}};
}

TEST(Eagle3Config, ReadsThePublishedKeys) {
  const ModelConfig t = tiny();
  const Eagle3Config c = parse_eagle3_config(head_json(t).dump(), "head/config.json", t);
  EXPECT_EQ(c.hidden_size, t.hidden_size);
  EXPECT_EQ(c.intermediate_size, 3 * t.hidden_size);
  EXPECT_EQ(c.draft_vocab_size, 1000);
  EXPECT_EQ(c.aux_layers, (std::vector<int64_t>{0, 1, t.num_layers}));
  EXPECT_FALSE(c.rope.yarn);
  EXPECT_DOUBLE_EQ(c.rope.theta, 10000.0);  // Llama's default: the public heads name none
  EXPECT_FALSE(c.norm_before_residual);
  nlohmann::json top = head_json(t);
  top.erase("eagle_config");
  top["eagle_aux_hidden_state_layer_ids"] = {1, 1, 2};
  top["norm_before_residual"] = true;
  top["rope_theta"] = 150000.0;
  const Eagle3Config d = parse_eagle3_config(top.dump(), "head/config.json", t);
  EXPECT_EQ(d.aux_layers, (std::vector<int64_t>{1, 1, 2}));
  EXPECT_TRUE(d.norm_before_residual);
  EXPECT_DOUBLE_EQ(d.rope.theta, 150000.0);
  top.erase("eagle_aux_hidden_state_layer_ids");
  EXPECT_EQ(parse_eagle3_config(top.dump(), "c", t).aux_layers, default_eagle3_aux_layers(t.num_layers));
}

TEST(Eagle3Config, DefaultAuxLayersAreVllmsForGptOss) {
  EXPECT_EQ(default_eagle3_aux_layers(36), (std::vector<int64_t>{2, 18, 33}));  // 120b
  EXPECT_EQ(default_eagle3_aux_layers(24), (std::vector<int64_t>{2, 12, 21}));  // 20b
  for (int64_t L : {1, 2, 3, 4, 5})
    for (int64_t id : default_eagle3_aux_layers(L)) {
      EXPECT_GE(id, 0);
      EXPECT_LE(id, L);
    }
}

TEST(Eagle3Config, HeadsThatDoNotFitTheTargetAreRefusedByName) {
  const ModelConfig t = tiny();
  auto error_of = [&](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json j = head_json(t);
    edit(j);
    try {
      parse_eagle3_config(j.dump(), "head/config.json", t);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error_of([&](auto& j) { j["hidden_size"] = t.hidden_size + 64; }).find("hidden_size"),
            std::string::npos);
  EXPECT_NE(error_of([&](auto& j) { j["vocab_size"] = 1000; }).find("vocab_size"), std::string::npos);
  EXPECT_NE(error_of([&](auto& j) { j["draft_vocab_size"] = t.vocab_size + 1; }).find("draft_vocab_size"),
            std::string::npos);
  EXPECT_NE(error_of([&](auto& j) {
              j["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = {0, 1, t.num_layers + 1};
            }).find("outside"),
            std::string::npos);
  EXPECT_NE(error_of([&](auto& j) {
              j["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = {0, 1};
            }).find("3 target layers"),
            std::string::npos);
  EXPECT_NE(error_of([&](auto& j) { j["architectures"] = {"LlamaForCausalLM"}; }).find("EAGLE-3"),
            std::string::npos);
  EXPECT_NE(error_of([&](auto& j) { j["num_key_value_heads"] = 3; }).find("multiple"), std::string::npos);
}

// Writes the synthetic head to `dir` under the names of another layout, with a config.json.
void write_head(const Eagle3Head& h, const std::filesystem::path& dir, const std::string& layer_prefix,
                const std::string& top_prefix, bool with_d2t) {
  std::filesystem::create_directories(dir);
  std::vector<io::TensorToWrite> out;
  for (const auto& [name, v] : h.checkpoint.tensors()) {
    if (name == "d2t" && !with_d2t) continue;
    std::string n = name;
    if (n.rfind("midlayer.", 0) == 0)
      n = layer_prefix + n.substr(9);
    else if (n != "lm_head.weight" && n != "d2t")
      n = top_prefix + n;
    out.push_back({n, v.dtype, v.shape, v.data});
  }
  io::write_safetensors((dir / "model.safetensors").string(), out);
  const ModelConfig t = tiny();
  nlohmann::json j = head_json(t);
  j["intermediate_size"] = h.config.intermediate_size;
  j["draft_vocab_size"] = h.config.draft_vocab_size;
  j["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = h.config.aux_layers;
  std::ofstream(dir / "config.json") << j.dump(1);
}

TEST(Eagle3Head, LoadsThePublicLayoutsAndMapsDraftIds) {
  const ModelConfig t = tiny();
  const Eagle3Head synth = load_eagle3_head("synthetic@5", t);
  EXPECT_EQ(synth.config.draft_vocab_size, std::min<int64_t>(32000, t.vocab_size));
  EXPECT_EQ(synth.draft_to_target.size(), size_t(synth.config.draft_vocab_size));
  for (size_t j = 1; j < synth.draft_to_target.size(); ++j)
    ASSERT_GT(synth.draft_to_target[j], synth.draft_to_target[j - 1]);  // evenly spread, distinct
  const auto dir = std::filesystem::temp_directory_path() / "orchid_eagle3_test";
  for (const auto& [layer, top] : {std::pair<std::string, std::string>{"midlayer.", ""},
                                   {"layers.0.", ""},
                                   {"model.layers.0.", "model."}}) {
    std::filesystem::remove_all(dir);
    write_head(synth, dir, layer, top, true);
    const Eagle3Head h = load_eagle3_head(dir.string(), t);
    EXPECT_EQ(h.draft_to_target, synth.draft_to_target) << layer;
    EXPECT_EQ(h.names.q, layer + "self_attn.q_proj.weight");
    EXPECT_EQ(h.names.fc, top + "fc.weight");
    EXPECT_FALSE(h.config.has_embedding);
  }
  // No d2t with a smaller draft vocabulary: refused, naming what is missing.
  std::filesystem::remove_all(dir);
  write_head(synth, dir, "midlayer.", "", false);
  try {
    load_eagle3_head(dir.string(), t);
    ADD_FAILURE() << "a head without d2t loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("d2t"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
  EXPECT_THROW(load_eagle3_head(dir.string(), t), Error);  // not a directory
}

}  // namespace
}  // namespace orchid::model
