#include "model/eagle3.h"

#include <nlohmann/json.hpp>

#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <memory>

#include "core/error.h"
#include "core/parse.h"
#include "core/thread_pool.h"
#include "model/synthetic.h"

namespace orchid::model {

using nlohmann::json;

namespace {

const json* find(const json& j, const char* key) {
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

int64_t int_field(const json& j, const char* key, const std::string& src) {
  const json* v = find(j, key);
  if (!v) fail("{}: missing field '{}'", src, key);
  if (!v->is_number_integer()) fail("{}: field '{}' must be an integer, got {}", src, key, v->dump());
  return v->get<int64_t>();
}

// A flag that may sit at the top level or under eagle_config (ModelOpt writes it there).
bool flag(const json& j, const char* key, const std::string& src) {
  const json* v = find(j, key);
  if (!v)
    if (const json* e = find(j, "eagle_config"); e && e->is_object()) v = find(*e, key);
  if (!v) return false;
  if (!v->is_boolean()) fail("{}: '{}' must be true or false", src, key);
  return v->get<bool>();
}

void check_config(const Eagle3Config& c, const std::string& src, const ModelConfig& target) {
  if (c.hidden_size != target.hidden_size)
    fail("{}: hidden_size {} does not match the target's {}", src, c.hidden_size, target.hidden_size);
  if (c.vocab_size != target.vocab_size)
    fail("{}: vocab_size {} does not match the target's {}", src, c.vocab_size, target.vocab_size);
  if (c.draft_vocab_size < 1 || c.draft_vocab_size > c.vocab_size)
    fail("{}: draft_vocab_size {} must be in [1, {}]", src, c.draft_vocab_size, c.vocab_size);
  if (c.intermediate_size < 1) fail("{}: intermediate_size must be positive", src);
  if (c.num_heads < 1 || c.num_kv_heads < 1 || c.num_heads % c.num_kv_heads != 0)
    fail("{}: num_attention_heads {} must be a positive multiple of num_key_value_heads {}", src, c.num_heads,
         c.num_kv_heads);
  if (c.head_dim < 2 || c.head_dim % 2 != 0) fail("{}: head_dim {} must be even", src, c.head_dim);
  if (c.aux_layers.size() != 3)
    fail("{}: eagle_aux_hidden_state_layer_ids must name 3 target layers, got {}", src, c.aux_layers.size());
  for (int64_t id : c.aux_layers)
    if (id < 0 || id > target.num_layers)
      fail("{}: aux hidden state layer {} is outside the target's [0, {}] (id k is the input of layer k)",
           src, id, target.num_layers);
}

io::TensorView make_tensor(io::Checkpoint& ck, const std::string& name, DType dtype,
                           std::vector<int64_t> shape, const std::function<void(uint8_t*, int64_t)>& fill) {
  io::TensorView v;
  v.name = name;
  v.dtype = dtype;
  v.shape = std::move(shape);
  v.nbytes = size_t(v.numel()) * dtype_size(dtype);
  std::shared_ptr<uint8_t[]> buf(new uint8_t[v.nbytes]);
  fill(buf.get(), v.numel());
  v.data = buf.get();
  v.source = ck.where();
  ck.add(v, std::shared_ptr<const void>(buf, buf.get()));
  return v;
}

// The names a head's checkpoint uses: `midlayer.` (SpecForge), `layers.0.` (ModelOpt, speculators), each
// possibly under `model.`.
std::string resolve(const io::Checkpoint& ck, const std::string& name, bool layer, bool required) {
  std::vector<std::string> tries;
  if (layer) {
    for (const char* p : {"midlayer.", "layers.0.", "model.layers.0.", "model.midlayer."})
      tries.push_back(p + name);
  } else {
    tries = {name, "model." + name};
  }
  for (const auto& t : tries)
    if (ck.has(t)) return t;
  if (required) fail("{}: missing tensor '{}' (looked for {})", ck.where(), tries[0], fmt::join(tries, ", "));
  return "";
}

void check_dense(const io::Checkpoint& ck, const std::string& name, std::vector<int64_t> shape) {
  const io::TensorView& t = ck.get(name);
  if (t.shape != shape)
    fail("{}: tensor '{}' has shape [{}], expected [{}]", t.source, name, fmt::join(t.shape, ", "),
         fmt::join(shape, ", "));
  if (t.dtype != DType::kBF16 && t.dtype != DType::kF16 && t.dtype != DType::kF32)
    fail("{}: tensor '{}' is {}, expected bf16, f16 or f32", t.source, name, dtype_name(t.dtype));
}

void resolve_and_check(Eagle3Head& h) {
  const Eagle3Config& c = h.config;
  const io::Checkpoint& ck = h.checkpoint;
  const int64_t H = c.hidden_size, I = c.intermediate_size;
  Eagle3Tensors& n = h.names;
  auto top = [&](const char* name, std::vector<int64_t> shape) {
    std::string r = resolve(ck, name, false, true);
    check_dense(ck, r, std::move(shape));
    return r;
  };
  auto mid = [&](const char* name, std::vector<int64_t> shape) {
    std::string r = resolve(ck, name, true, true);
    check_dense(ck, r, std::move(shape));
    return r;
  };
  n.fc = top("fc.weight", {H, 3 * H});
  if (c.norm_before_fc) n.input_norm_fc = top("input_norm.weight", {3 * H});
  n.input_layernorm = mid("input_layernorm.weight", {H});
  n.hidden_norm = mid("hidden_norm.weight", {H});
  n.q = mid("self_attn.q_proj.weight", {c.q_dim(), 2 * H});
  n.k = mid("self_attn.k_proj.weight", {c.kv_dim(), 2 * H});
  n.v = mid("self_attn.v_proj.weight", {c.kv_dim(), 2 * H});
  n.o = mid("self_attn.o_proj.weight", {H, c.q_dim()});
  n.post_norm = mid("post_attention_layernorm.weight", {H});
  n.gate = mid("mlp.gate_proj.weight", {I, H});
  n.up = mid("mlp.up_proj.weight", {I, H});
  n.down = mid("mlp.down_proj.weight", {H, I});
  n.final_norm = top("norm.weight", {H});
  n.lm_head = top("lm_head.weight", {c.draft_vocab_size, H});
  n.embedding = resolve(ck, "embed_tokens.weight", false, false);
  if (!n.embedding.empty()) check_dense(ck, n.embedding, {c.vocab_size, H});
  h.config.has_embedding = !n.embedding.empty();

  // d2t: target id of draft id j is j + d2t[j]; absent only when both vocabularies are one.
  n.d2t = resolve(ck, "d2t", false, false);
  h.draft_to_target.resize(size_t(c.draft_vocab_size));
  if (n.d2t.empty()) {
    if (c.draft_vocab_size != c.vocab_size)
      fail("{}: no d2t tensor, but the draft vocabulary ({}) is not the target's ({})", ck.where(),
           c.draft_vocab_size, c.vocab_size);
    for (int64_t j = 0; j < c.draft_vocab_size; ++j) h.draft_to_target[size_t(j)] = j;
    return;
  }
  const io::TensorView& d = ck.get(n.d2t);
  if (d.dtype != DType::kI64 || d.shape != std::vector<int64_t>{c.draft_vocab_size})
    fail("{}: tensor '{}' must be int64 [{}]", d.source, n.d2t, c.draft_vocab_size);
  const int64_t* off = d.as<int64_t>();
  for (int64_t j = 0; j < c.draft_vocab_size; ++j) {
    const int64_t t = j + off[j];
    if (t < 0 || t >= c.vocab_size)
      fail("{}: d2t maps draft id {} to {}, outside the vocabulary of {}", d.source, j, t, c.vocab_size);
    h.draft_to_target[size_t(j)] = t;
  }
}

Eagle3Head synthetic_head(const ModelConfig& target, uint64_t seed) {
  Eagle3Head h;
  h.config = synthetic_eagle3_config(target);
  const Eagle3Config& c = h.config;
  io::Checkpoint& ck = h.checkpoint;
  ck.set_where(fmt::format("synthetic EAGLE-3 head@{}", seed));
  const int64_t H = c.hidden_size, I = c.intermediate_size;
  auto random = [&](const std::string& name, std::vector<int64_t> shape, TensorRole role) {
    TensorSpec spec{name, shape, {DType::kBF16}, role, -1};
    make_tensor(ck, name, DType::kBF16, shape, [&](uint8_t* out, int64_t numel) {
      ThreadPool::global().parallel_for(size_t(numel), 1 << 16, [&](size_t b, size_t e) {
        fill_synthetic(spec, seed, DType::kBF16, int64_t(b), int64_t(e - b), out + b * 2);
      });
    });
  };
  random("fc.weight", {H, 3 * H}, TensorRole::kQProj);
  random("midlayer.input_layernorm.weight", {H}, TensorRole::kInputNorm);
  random("midlayer.hidden_norm.weight", {H}, TensorRole::kInputNorm);
  random("midlayer.self_attn.q_proj.weight", {c.q_dim(), 2 * H}, TensorRole::kQProj);
  random("midlayer.self_attn.k_proj.weight", {c.kv_dim(), 2 * H}, TensorRole::kKProj);
  random("midlayer.self_attn.v_proj.weight", {c.kv_dim(), 2 * H}, TensorRole::kVProj);
  random("midlayer.self_attn.o_proj.weight", {H, c.q_dim()}, TensorRole::kOProj);
  random("midlayer.post_attention_layernorm.weight", {H}, TensorRole::kPostNorm);
  random("midlayer.mlp.gate_proj.weight", {I, H}, TensorRole::kQProj);
  random("midlayer.mlp.up_proj.weight", {I, H}, TensorRole::kQProj);
  random("midlayer.mlp.down_proj.weight", {H, I}, TensorRole::kOProj);
  random("norm.weight", {H}, TensorRole::kFinalNorm);
  random("lm_head.weight", {c.draft_vocab_size, H}, TensorRole::kLmHead);
  // Draft ids spread evenly over the target's vocabulary.
  make_tensor(ck, "d2t", DType::kI64, {c.draft_vocab_size}, [&](uint8_t* out, int64_t numel) {
    auto* d = reinterpret_cast<int64_t*>(out);
    for (int64_t j = 0; j < numel; ++j) d[j] = j * c.vocab_size / c.draft_vocab_size - j;
  });
  resolve_and_check(h);
  return h;
}

}  // namespace

std::vector<int64_t> default_eagle3_aux_layers(int64_t L) {
  if (L >= 6) return {2, L / 2, L - 3};
  // Small models (tests): three ids in [1, L - 1], repeated where L is too small for distinct ones.
  const int64_t top = std::max<int64_t>(1, L - 1);
  return {std::min<int64_t>(1, top), std::max<int64_t>(1, L / 2), top};
}

Eagle3Config synthetic_eagle3_config(const ModelConfig& target) {
  Eagle3Config c;
  c.hidden_size = target.hidden_size;
  c.intermediate_size = 2 * target.hidden_size;
  c.num_heads = target.num_heads;
  c.num_kv_heads = target.num_kv_heads;
  c.head_dim = target.head_dim;
  c.vocab_size = target.vocab_size;
  c.draft_vocab_size = std::min<int64_t>(32000, target.vocab_size);
  c.max_position_embeddings = target.max_position_embeddings;
  c.rms_norm_eps = target.rms_norm_eps;
  c.rope.theta = 10000.0;
  c.rope.yarn = false;
  c.rope.factor = 1.0;
  c.aux_layers = default_eagle3_aux_layers(target.num_layers);
  return c;
}

Eagle3Config parse_eagle3_config(const std::string& text, const std::string& src, const ModelConfig& target) {
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) fail("{}: not a JSON object", src);
  if (const json* a = find(j, "architectures")) {
    bool eagle3 = false;
    if (a->is_array())
      for (const auto& x : *a)
        if (x.is_string() && x.get<std::string>() == "LlamaForCausalLMEagle3") eagle3 = true;
    if (!eagle3) fail("{}: architectures {} is not an EAGLE-3 head (LlamaForCausalLMEagle3)", src, a->dump());
  }
  Eagle3Config c;
  c.hidden_size = int_field(j, "hidden_size", src);
  c.intermediate_size = int_field(j, "intermediate_size", src);
  c.num_heads = int_field(j, "num_attention_heads", src);
  c.num_kv_heads = find(j, "num_key_value_heads") ? int_field(j, "num_key_value_heads", src) : c.num_heads;
  if (c.num_heads < 1) fail("{}: num_attention_heads must be positive", src);
  c.head_dim = find(j, "head_dim") ? int_field(j, "head_dim", src) : c.hidden_size / c.num_heads;
  c.vocab_size = int_field(j, "vocab_size", src);
  c.draft_vocab_size = find(j, "draft_vocab_size") ? int_field(j, "draft_vocab_size", src) : c.vocab_size;
  c.max_position_embeddings = find(j, "max_position_embeddings")
                                  ? int_field(j, "max_position_embeddings", src)
                                  : target.max_position_embeddings;
  if (const json* e = find(j, "rms_norm_eps")) {
    if (!e->is_number()) fail("{}: rms_norm_eps must be a number", src);
    c.rms_norm_eps = e->get<double>();
  }
  json rope = j;  // Llama's default theta when the config names none
  if (!find(rope, "rope_theta") && !find(rope, "rope_parameters")) rope["rope_theta"] = 10000.0;
  c.rope = parse_rope_config(rope, src);
  const json* ids = find(j, "eagle_aux_hidden_state_layer_ids");
  if (!ids)
    if (const json* e = find(j, "eagle_config"); e && e->is_object())
      ids = find(*e, "eagle_aux_hidden_state_layer_ids");
  if (ids) {
    if (!ids->is_array()) fail("{}: eagle_aux_hidden_state_layer_ids must be a list", src);
    for (const auto& x : *ids) {
      if (!x.is_number_integer()) fail("{}: eagle_aux_hidden_state_layer_ids must hold integers", src);
      c.aux_layers.push_back(x.get<int64_t>());
    }
  } else {
    c.aux_layers = default_eagle3_aux_layers(target.num_layers);
  }
  c.norm_before_residual = flag(j, "norm_before_residual", src);
  c.norm_before_fc = flag(j, "norm_before_fc", src);
  check_config(c, src, target);
  return c;
}

Eagle3Head load_eagle3_head(const std::string& arg, const ModelConfig& target) {
  if (arg == "synthetic" || arg.rfind("synthetic@", 0) == 0) {
    const uint64_t seed = arg == "synthetic" ? 0 : uint64_t(parse_int(arg.substr(10), "EAGLE-3 head seed"));
    return synthetic_head(target, seed);
  }
  const std::filesystem::path dir(arg);
  if (!std::filesystem::is_directory(dir))
    fail("EAGLE-3 head '{}': not a directory (or `synthetic[@seed]`)", arg);
  const std::string cfg = (dir / "config.json").string();
  Eagle3Head h;
  h.config = parse_eagle3_config(read_text_file(cfg, "EAGLE-3 head config"), cfg, target);
  h.checkpoint = io::Checkpoint::open_dir(arg);
  resolve_and_check(h);
  return h;
}

}  // namespace orchid::model
