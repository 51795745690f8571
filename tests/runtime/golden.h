// The golden tiny checkpoint made by tools/golden/make_golden.py with transformers (FP32 reference).
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "io/npy.h"

namespace orchid::testing {

struct Golden {
  std::string checkpoint;  // directory (config in transformers 4 style)
  std::vector<int32_t> prompt, greedy;
  std::vector<float> logits;  // [prompt + greedy[:-1], vocab]
  int64_t rows = 0, vocab = 0;
  float max_abs = 0;

  std::vector<int32_t> sequence() const {  // the ids the logits rows belong to
    std::vector<int32_t> s = prompt;
    s.insert(s.end(), greedy.begin(), greedy.end() - 1);
    return s;
  }
};

inline Golden load_golden() {
  const std::string dir = std::string(ORCHID_SOURCE_DIR) + "/tests/golden/tiny";
  Golden g;
  g.checkpoint = dir + "/checkpoint";
  std::ifstream f(dir + "/reference.json");
  auto j = nlohmann::json::parse(f);
  g.prompt = j["prompt_ids"].get<std::vector<int32_t>>();
  g.greedy = j["greedy_ids"].get<std::vector<int32_t>>();
  auto a = io::read_npy(dir + "/logits.npy");
  g.logits = a.as_f32();
  g.rows = a.shape[0];
  g.vocab = a.shape[1];
  for (float v : g.logits) g.max_abs = std::max(g.max_abs, std::abs(v));
  return g;
}

// The same checkpoint with its config in transformers 5 style (rope_parameters), as a temporary directory.
inline std::string golden_checkpoint_v5(const Golden& g) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("orchid_golden_v5_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const auto& e : fs::directory_iterator(g.checkpoint)) {
    const auto name = e.path().filename().string();
    if (name.ends_with(".safetensors") || name == "model.safetensors.index.json")
      fs::create_symlink(fs::absolute(e.path()), dir / name);
  }
  fs::copy_file(fs::path(g.checkpoint) / "config.transformers5.json", dir / "config.json");
  return dir.string();
}

}  // namespace orchid::testing
