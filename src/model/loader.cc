#include "model/loader.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/parse.h"
#include "model/packed_rows.h"
#include "model/synthetic.h"

namespace orchid::model {

namespace fs = std::filesystem;

ModelRef parse_model_ref(const std::string& arg) {
  ModelRef r;
  static constexpr std::string_view kPrefix = "synthetic:";
  if (arg.rfind(kPrefix, 0) == 0) {
    r.synthetic = true;
    std::string rest = arg.substr(kPrefix.size());
    auto at = rest.find('@');
    r.preset = rest.substr(0, at);
    if (at != std::string::npos) {
      int64_t s = parse_int(rest.substr(at + 1), "MODEL seed (synthetic:PRESET@SEED)");
      if (s < 0) fail("MODEL seed must not be negative, got {}", s);
      r.seed = uint64_t(s);
    }
    preset_config(r.preset);  // validates the name
    return r;
  }
  if (arg.empty()) fail("MODEL is empty: give a model directory or synthetic:tiny|20b|120b[@seed]");
  if (!fs::is_directory(arg))
    fail(
        "MODEL '{}' is not a directory (give a Hugging Face model directory or "
        "synthetic:tiny|20b|120b[@seed])",
        arg);
  r.dir = arg;
  return r;
}

ModelConfig load_config(const ModelRef& ref) {
  if (ref.synthetic) {
    ModelConfig c = preset_config(ref.preset);
    c.name = "synthetic:" + ref.preset + "@" + std::to_string(ref.seed);
    return c;
  }
  const fs::path cfg = fs::path(ref.dir) / "config.json";
  if (!fs::exists(cfg)) fail("model directory '{}' has no config.json", ref.dir);
  ModelConfig c = ModelConfig::from_file(cfg.string());
  const fs::path gen = fs::path(ref.dir) / "generation_config.json";
  if (fs::exists(gen)) {
    std::ifstream in(gen);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
      fail("{}: not valid JSON ({})", gen.string(), e.what());
    }
    c.merge_generation_config(j, gen.string());
  }
  return c;
}

io::Checkpoint open_checkpoint(const std::string& dir, const std::vector<TensorSpec>& manifest) {
  io::Checkpoint ck = io::Checkpoint::open_dir(dir);
  expand_packed_rows(ck, manifest);
  validate_checkpoint(ck, manifest);
  return ck;
}

LoadedModel load_model(const std::string& arg) {
  ModelRef ref = parse_model_ref(arg);
  LoadedModel m{load_config(ref), {}};
  const auto manifest = gpt_oss_manifest(m.config);
  if (ref.synthetic) {
    m.checkpoint = synthetic_checkpoint(m.config, ref.seed);
    validate_checkpoint(m.checkpoint, manifest);
  } else {
    m.checkpoint = open_checkpoint(ref.dir, manifest);
  }
  return m;
}

}  // namespace orchid::model
