#include "model/config.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>

#include "core/error.h"

namespace orchid::model {

using nlohmann::json;

namespace {

const json* find(const json& j, std::string_view key) {
  auto it = j.find(std::string(key));
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

int64_t get_int(const json& j, std::string_view key, std::string_view src) {
  const json* v = find(j, key);
  if (!v) fail("{}: missing field '{}'", src, key);
  if (v->is_number_integer()) return v->get<int64_t>();
  if (v->is_number_float() && v->get<double>() == double(int64_t(v->get<double>())))
    return int64_t(v->get<double>());
  fail("{}: field '{}' must be an integer, got {}", src, key, v->dump());
}

double get_double(const json& j, std::string_view key, std::string_view src) {
  const json* v = find(j, key);
  if (!v) fail("{}: missing field '{}'", src, key);
  if (!v->is_number()) fail("{}: field '{}' must be a number, got {}", src, key, v->dump());
  return v->get<double>();
}

int64_t get_int_any(const json& j, std::initializer_list<std::string_view> keys, std::string_view src) {
  for (auto k : keys)
    if (find(j, k)) return get_int(j, k, src);
  std::string names;
  for (auto k : keys) names += (names.empty() ? "'" : " or '") + std::string(k) + "'";
  fail("{}: missing field {}", src, names);
}

RopeConfig parse_rope(const json& j, std::string_view src) {
  RopeConfig r;
  // transformers 5.x: everything inside rope_parameters; 4.x: rope_scaling plus top-level rope_theta.
  const json* params = find(j, "rope_parameters");
  const char* params_name = "rope_parameters";
  if (!params) {
    params = find(j, "rope_scaling");
    params_name = "rope_scaling";
  }
  if (params && !params->is_object()) fail("{}: '{}' must be an object", src, params_name);
  if (params && find(*params, "rope_theta")) {
    r.theta = get_double(*params, "rope_theta", fmt::format("{} ({})", src, params_name));
  } else if (find(j, "rope_theta")) {
    r.theta = get_double(j, "rope_theta", src);
  } else {
    fail("{}: missing field 'rope_theta' (top level or inside rope_parameters)", src);
  }
  if (!params) {
    r.yarn = false;
    r.factor = 1.0;
    return r;
  }
  std::string sub = fmt::format("{} ({})", src, params_name);
  std::string type;
  if (const json* t = find(*params, "rope_type"))
    type = t->is_string() ? t->get<std::string>() : "";
  else if (const json* t2 = find(*params, "type"))
    type = t2->is_string() ? t2->get<std::string>() : "";
  if (type.empty() || type == "default") {
    r.yarn = false;
    r.factor = 1.0;
    return r;
  }
  if (type != "yarn") fail("{}: rope_type '{}' is not supported (gpt-oss uses 'yarn')", sub, type);
  r.yarn = true;
  r.factor = get_double(*params, "factor", sub);
  if (find(*params, "beta_fast")) r.beta_fast = get_double(*params, "beta_fast", sub);
  if (find(*params, "beta_slow")) r.beta_slow = get_double(*params, "beta_slow", sub);
  r.original_max_position = get_int(*params, "original_max_position_embeddings", sub);
  if (const json* t = find(*params, "truncate")) {
    if (!t->is_boolean()) fail("{}: 'truncate' must be true or false", sub);
    r.truncate = t->get<bool>();
  } else {
    r.truncate = true;  // transformers' default when the field is absent
  }
  return r;
}

}  // namespace

RopeConfig parse_rope_config(const json& j, std::string_view source) {
  return parse_rope(j, source);
}

int64_t ModelConfig::num_full_layers() const {
  return int64_t(std::count(layer_types.begin(), layer_types.end(), LayerType::kFull));
}

namespace {
// eos_token_id of a config or generation config: absent, an integer, or a list of integers.
std::vector<int64_t> eos_ids_of(const json& j, std::string_view src) {
  std::vector<int64_t> ids;
  const auto it = j.find("eos_token_id");
  if (it == j.end() || it->is_null()) return ids;
  if (it->is_number_integer()) {
    ids.push_back(it->get<int64_t>());
  } else if (it->is_array()) {
    for (const auto& x : *it) {
      if (!x.is_number_integer()) fail("{}: eos_token_id entries must be integers", src);
      ids.push_back(x.get<int64_t>());
    }
  } else {
    fail("{}: eos_token_id must be an integer or a list", src);
  }
  return ids;
}
}  // namespace

void ModelConfig::merge_generation_config(const json& j, std::string_view src) {
  if (!j.is_object()) fail("{}: expected a JSON object", src);
  for (int64_t id : eos_ids_of(j, src)) {
    if (id < 0 || id >= vocab_size)
      fail("{}: eos_token_id {} is outside the vocabulary ({})", src, id, vocab_size);
    if (std::find(eos_token_ids.begin(), eos_token_ids.end(), id) == eos_token_ids.end())
      eos_token_ids.push_back(id);
  }
}

ModelConfig ModelConfig::from_json(const json& j, std::string_view src) {
  if (!j.is_object()) fail("{}: expected a JSON object", src);
  ModelConfig c;
  c.name = std::string(src);
  if (const json* mt = find(j, "model_type"); mt && mt->is_string() && mt->get<std::string>() != "gpt_oss")
    fail("{}: model_type is '{}', orchid serves 'gpt_oss'", src, mt->get<std::string>());
  c.hidden_size = get_int(j, "hidden_size", src);
  c.intermediate_size = get_int(j, "intermediate_size", src);
  c.num_layers = get_int(j, "num_hidden_layers", src);
  c.num_experts = get_int_any(j, {"num_local_experts", "num_experts"}, src);
  c.experts_per_token = get_int_any(j, {"num_experts_per_tok", "experts_per_token"}, src);
  c.num_heads = get_int(j, "num_attention_heads", src);
  c.num_kv_heads = get_int(j, "num_key_value_heads", src);
  c.head_dim =
      find(j, "head_dim") ? get_int(j, "head_dim", src) : (c.num_heads > 0 ? c.hidden_size / c.num_heads : 0);
  c.vocab_size = get_int(j, "vocab_size", src);
  c.sliding_window = find(j, "sliding_window") ? get_int(j, "sliding_window", src) : 0;
  c.rope = parse_rope(j, src);
  if (find(j, "swiglu_limit")) c.swiglu_limit = get_double(j, "swiglu_limit", src);
  if (find(j, "swiglu_alpha")) c.swiglu_alpha = get_double(j, "swiglu_alpha", src);
  if (find(j, "rms_norm_eps")) c.rms_norm_eps = get_double(j, "rms_norm_eps", src);
  if (find(j, "max_position_embeddings"))
    c.max_position_embeddings = get_int(j, "max_position_embeddings", src);
  if (const json* t = find(j, "tie_word_embeddings")) {
    if (!t->is_boolean()) fail("{}: 'tie_word_embeddings' must be true or false", src);
    c.tie_word_embeddings = t->get<bool>();
  }
  if (const json* lt = find(j, "layer_types")) {
    if (!lt->is_array()) fail("{}: 'layer_types' must be an array", src);
    for (size_t i = 0; i < lt->size(); ++i) {
      const json& e = (*lt)[i];
      std::string s = e.is_string() ? e.get<std::string>() : e.dump();
      if (s == "sliding_attention")
        c.layer_types.push_back(LayerType::kSliding);
      else if (s == "full_attention")
        c.layer_types.push_back(LayerType::kFull);
      else
        fail("{}: layer_types[{}] is '{}', expected 'sliding_attention' or 'full_attention'", src, i, s);
    }
  } else if (c.num_layers > 0) {
    // gpt-oss convention (and transformers' default): even layers slide, odd layers see everything.
    for (int64_t i = 0; i < c.num_layers; ++i)
      c.layer_types.push_back(c.sliding_window > 0 && i % 2 == 0 ? LayerType::kSliding : LayerType::kFull);
  }
  c.experts_mxfp4 = false;
  if (const json* q = find(j, "quantization_config")) {
    if (!q->is_object()) fail("{}: 'quantization_config' must be an object", src);
    const json* m = find(*q, "quant_method");
    std::string method = m && m->is_string() ? m->get<std::string>() : "";
    if (method != "mxfp4")
      fail("{}: quantization_config.quant_method '{}' is not supported (only 'mxfp4')", src, method);
    c.experts_mxfp4 = true;
  }
  c.eos_token_ids = eos_ids_of(j, src);
  if (const json* p = find(j, "pad_token_id")) {
    if (!p->is_number_integer()) fail("{}: pad_token_id must be an integer", src);
    c.pad_token_id = p->get<int64_t>();
  }
  c.validate(src);
  return c;
}

void ModelConfig::validate(std::string_view src) const {
  auto positive = [&](int64_t v, const char* field) {
    if (v <= 0) fail("{}: '{}' must be positive, got {}", src, field, v);
  };
  positive(hidden_size, "hidden_size");
  positive(intermediate_size, "intermediate_size");
  positive(num_layers, "num_hidden_layers");
  positive(num_experts, "num_local_experts");
  positive(experts_per_token, "num_experts_per_tok");
  positive(num_heads, "num_attention_heads");
  positive(num_kv_heads, "num_key_value_heads");
  positive(head_dim, "head_dim");
  positive(vocab_size, "vocab_size");
  positive(max_position_embeddings, "max_position_embeddings");
  if (experts_per_token > num_experts)
    fail("{}: num_experts_per_tok ({}) exceeds num_local_experts ({})", src, experts_per_token, num_experts);
  if (num_heads % num_kv_heads != 0)
    fail("{}: num_attention_heads ({}) is not a multiple of num_key_value_heads ({})", src, num_heads,
         num_kv_heads);
  if (head_dim % 2 != 0) fail("{}: head_dim ({}) must be even for RoPE", src, head_dim);
  if (int64_t(layer_types.size()) != num_layers)
    fail("{}: layer_types has {} entries but num_hidden_layers is {}", src, layer_types.size(), num_layers);
  if (num_sliding_layers() > 0 && sliding_window <= 0)
    fail("{}: layer_types has sliding layers but sliding_window is {}", src, sliding_window);
  if (sliding_window < 0) fail("{}: sliding_window must not be negative", src);
  if (experts_mxfp4 && (hidden_size % 32 != 0 || intermediate_size % 32 != 0))
    fail("{}: MXFP4 experts need hidden_size ({}) and intermediate_size ({}) to be multiples of 32", src,
         hidden_size, intermediate_size);
  if (!(rms_norm_eps > 0)) fail("{}: rms_norm_eps must be positive", src);
  if (!(swiglu_limit > 0)) fail("{}: swiglu_limit must be positive", src);
  if (!(rope.theta > 1)) fail("{}: rope_theta must be > 1", src);
  if (rope.yarn) {
    if (!(rope.factor >= 1)) fail("{}: rope factor must be >= 1", src);
    if (rope.original_max_position <= 0) fail("{}: original_max_position_embeddings must be positive", src);
    if (!(rope.beta_fast > 0 && rope.beta_slow > 0))
      fail("{}: rope beta_fast and beta_slow must be positive", src);
  }
  for (int64_t id : eos_token_ids)
    if (id < 0 || id >= vocab_size)
      fail("{}: eos_token_id {} is outside the vocabulary ({})", src, id, vocab_size);
}

ModelConfig ModelConfig::from_file(const std::string& path) {
  std::ifstream f(path);
  if (!f) fail("cannot open model config '{}'", path);
  json j;
  try {
    j = json::parse(f);
  } catch (const json::exception& e) {
    fail("{}: invalid JSON: {}", path, e.what());
  }
  return from_json(j, path);
}

json ModelConfig::to_json(ConfigStyle style) const {
  json j = json::object();
  j["architectures"] = json::array({"GptOssForCausalLM"});
  j["model_type"] = "gpt_oss";
  j["hidden_size"] = hidden_size;
  j["intermediate_size"] = intermediate_size;
  j["num_hidden_layers"] = num_layers;
  j["num_local_experts"] = num_experts;
  j["num_experts_per_tok"] = experts_per_token;
  j["experts_per_token"] = experts_per_token;
  j["num_attention_heads"] = num_heads;
  j["num_key_value_heads"] = num_kv_heads;
  j["head_dim"] = head_dim;
  j["vocab_size"] = vocab_size;
  j["max_position_embeddings"] = max_position_embeddings;
  j["initial_context_length"] = rope.original_max_position;
  j["sliding_window"] = sliding_window;
  json lt = json::array();
  for (auto t : layer_types) lt.push_back(t == LayerType::kSliding ? "sliding_attention" : "full_attention");
  j["layer_types"] = lt;
  j["swiglu_limit"] = swiglu_limit;
  j["rms_norm_eps"] = rms_norm_eps;
  j["attention_bias"] = true;
  j["attention_dropout"] = 0.0;
  j["hidden_act"] = "silu";
  j["tie_word_embeddings"] = tie_word_embeddings;
  j["router_aux_loss_coef"] = 0.9;
  j["output_router_logits"] = false;
  j["use_cache"] = true;
  j["initializer_range"] = 0.02;
  if (!eos_token_ids.empty())
    j["eos_token_id"] = eos_token_ids.size() == 1 ? json(eos_token_ids[0]) : json(eos_token_ids);
  if (pad_token_id >= 0) j["pad_token_id"] = pad_token_id;
  json rope_j = json::object();
  if (rope.yarn) {
    rope_j["rope_type"] = "yarn";
    rope_j["factor"] = rope.factor;
    rope_j["beta_fast"] = rope.beta_fast;
    rope_j["beta_slow"] = rope.beta_slow;
    rope_j["original_max_position_embeddings"] = rope.original_max_position;
    rope_j["truncate"] = rope.truncate;
  } else {
    rope_j["rope_type"] = "default";
  }
  if (style == ConfigStyle::kTransformers5) {
    rope_j["rope_theta"] = rope.theta;
    j["rope_parameters"] = rope_j;
    j["swiglu_alpha"] = swiglu_alpha;
    j["transformers_version"] = "5.0.0";
  } else {
    j["rope_theta"] = rope.theta;
    j["rope_scaling"] = rope.yarn ? rope_j : json(nullptr);
    j["transformers_version"] = "4.57.0";
  }
  if (experts_mxfp4) {
    j["quantization_config"] = {
        {"quant_method", "mxfp4"},
        {"modules_to_not_convert",
         {"model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"}}};
  }
  return j;
}

namespace {
ModelConfig gpt_oss_base() {
  ModelConfig c;
  c.hidden_size = 2880;
  c.intermediate_size = 2880;
  c.experts_per_token = 4;
  c.num_heads = 64;
  c.num_kv_heads = 8;
  c.head_dim = 64;
  c.vocab_size = 201088;
  c.sliding_window = 128;
  c.max_position_embeddings = 131072;
  c.eos_token_ids = {200002, 199999, 200012};  // as the synthetic checkpoint's generation_config.json
  c.pad_token_id = 199999;
  return c;
}
void alternate_layers(ModelConfig& c) {
  c.layer_types.clear();
  for (int64_t i = 0; i < c.num_layers; ++i)
    c.layer_types.push_back(i % 2 == 0 ? LayerType::kSliding : LayerType::kFull);
}
}  // namespace

std::vector<std::string> preset_names() {
  return {"tiny", "20b", "120b"};
}

ModelConfig preset_config(std::string_view name) {
  ModelConfig c = gpt_oss_base();
  if (name == "20b") {
    c.num_layers = 24;
    c.num_experts = 32;
  } else if (name == "120b") {
    c.num_layers = 36;
    c.num_experts = 128;
  } else if (name == "tiny") {
    // Every feature of the real model at toy width: head_dim 64 as in gpt-oss, GQA 4:1, 8 experts top-4,
    // both layer kinds with a window far shorter than test prompts, and the full vocabulary so the
    // real tokenizer and Harmony work against it.
    c.hidden_size = 128;
    c.intermediate_size = 128;
    c.num_layers = 4;
    c.num_experts = 8;
    c.num_heads = 8;
    c.num_kv_heads = 2;
    c.sliding_window = 16;
    c.max_position_embeddings = 131072;
  } else {
    std::string names;
    for (auto& n : preset_names()) names += (names.empty() ? "" : ", ") + n;
    fail("unknown model preset '{}' (known: {})", name, names);
  }
  alternate_layers(c);
  c.name = "synthetic:" + std::string(name);
  c.validate(c.name);
  return c;
}

}  // namespace orchid::model
