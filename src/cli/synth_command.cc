// orchid synth DIR --preset tiny|20b|120b [--seed N]: writes a Hugging Face-layout gpt-oss checkpoint with
// deterministic random weights (the same as `synthetic:PRESET@N`), MXFP4 experts, sharded with an index.
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <filesystem>
#include <fstream>

#include "cli/commands.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "io/safetensors.h"
#include "model/manifest.h"
#include "model/synthetic.h"

namespace orchid::cli {

namespace fs = std::filesystem;

namespace {
struct SynthArgs {
  std::string dir, preset = "tiny", style = "4";
  int64_t seed = 0;
  double shard_gb = 5.0;
};

void write_json(const fs::path& p, const nlohmann::json& j) {
  std::ofstream f(p);
  if (!f) fail("cannot write '{}'", p.string());
  f << j.dump(2) << "\n";
}
}  // namespace

void add_synth_command(CLI::App& app) {
  auto a = std::make_shared<SynthArgs>();
  auto* cmd = app.add_subcommand("synth", "Write a synthetic gpt-oss checkpoint in the Hugging Face layout");
  cmd->add_option("DIR", a->dir, "output directory (created; must be empty if it exists)")->required();
  cmd->add_option("--preset", a->preset, "tiny, 20b or 120b")->capture_default_str();
  cmd->add_option("--seed", a->seed, "weight seed")->check(CLI::Range(int64_t(0), INT64_MAX))->capture_default_str();
  cmd->add_option("--config-style", a->style, "config.json as written by transformers 4 (rope_scaling) or 5 (rope_parameters)")
      ->check(CLI::IsMember({"4", "5"}))
      ->capture_default_str();
  cmd->add_option("--shard-size-gb", a->shard_gb, "largest shard in GB")->check(CLI::Range(0.000001, 1000.0))->capture_default_str();
  cmd->callback([a] {
    model::ModelConfig c = model::preset_config(a->preset);
    const uint64_t seed = uint64_t(a->seed);
    if (fs::exists(a->dir) && !fs::is_empty(a->dir)) fail("synth: '{}' exists and is not empty", a->dir);
    fs::create_directories(a->dir);
    write_json(fs::path(a->dir) / "config.json",
               c.to_json(a->style == "5" ? model::ConfigStyle::kTransformers5 : model::ConfigStyle::kTransformers4));
    write_json(fs::path(a->dir) / "generation_config.json",
               {{"bos_token_id", 199998}, {"eos_token_id", {200002, 199999, 200012}}, {"pad_token_id", 199999}});

    // Shards in manifest order, each at most --shard-size-gb.
    const auto manifest = model::gpt_oss_manifest(c);
    const uint64_t limit = uint64_t(a->shard_gb * 1e9);
    std::vector<std::vector<size_t>> shards(1);
    uint64_t in_shard = 0, total = 0;
    auto bytes_of = [](const model::TensorSpec& s) {
      uint64_t n = 1;
      for (int64_t d : s.shape) n *= uint64_t(d);
      return n * dtype_size(s.dtypes.front());
    };
    for (size_t i = 0; i < manifest.size(); ++i) {
      const uint64_t b = bytes_of(manifest[i]);
      if (in_shard > 0 && in_shard + b > limit) {
        shards.emplace_back();
        in_shard = 0;
      }
      shards.back().push_back(i);
      in_shard += b;
      total += b;
    }
    nlohmann::json weight_map = nlohmann::json::object();
    for (size_t s = 0; s < shards.size(); ++s) {
      const std::string name = fmt::format("model-{:05d}-of-{:05d}.safetensors", s + 1, shards.size());
      std::vector<io::TensorToWrite> list;
      for (size_t i : shards[s]) {
        list.push_back({manifest[i].name, manifest[i].dtypes.front(), manifest[i].shape, nullptr});
        weight_map[manifest[i].name] = name;
      }
      io::write_safetensors_streaming(
          (fs::path(a->dir) / name).string(), list,
          [&](size_t k, uint8_t* out) {
            const auto& spec = manifest[shards[s][k]];
            const DType dt = spec.dtypes.front();
            const size_t n = bytes_of(spec) / dtype_size(dt);
            ThreadPool::global().parallel_for(n, 1 << 16, [&](size_t b, size_t e) {
              model::fill_synthetic(spec, seed, dt, int64_t(b), int64_t(e - b), out + b * dtype_size(dt));
            });
          },
          {{"format", "pt"}});
      spdlog::info("wrote {} ({} tensors)", name, list.size());
    }
    write_json(fs::path(a->dir) / "model.safetensors.index.json",
               {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}});
    spdlog::info("synthetic {} (seed {}) written to {}: {:.2f} GB", a->preset, seed, a->dir, double(total) / 1e9);
  });
}

}  // namespace orchid::cli
