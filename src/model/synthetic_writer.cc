#include "model/synthetic_writer.h"

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/thread_pool.h"
#include "io/safetensors.h"
#include "model/manifest.h"
#include "model/synthetic.h"

namespace orchid::model {

namespace fs = std::filesystem;

namespace {
void write_json(const fs::path& p, const nlohmann::json& j) {
  std::ofstream f(p);
  if (!f) fail("cannot write '{}'", p.string());
  f << j.dump(2) << "\n";
}
uint64_t bytes_of(const TensorSpec& s) {
  uint64_t n = 1;
  for (int64_t d : s.shape) n *= uint64_t(d);
  return n * dtype_size(s.dtypes.front());
}
}  // namespace

uint64_t write_synthetic_checkpoint(const std::string& dir, const ModelConfig& c,
                                    const SyntheticWriteOptions& o) {
  if (fs::exists(dir) && !fs::is_empty(dir)) fail("'{}' exists and is not empty", dir);
  fs::create_directories(dir);
  write_json(fs::path(dir) / "config.json", c.to_json(o.style));
  write_json(
      fs::path(dir) / "generation_config.json",
      {{"bos_token_id", 199998}, {"eos_token_id", {200002, 199999, 200012}}, {"pad_token_id", 199999}});

  const auto manifest = gpt_oss_manifest(c);
  std::vector<std::vector<size_t>> shards(1);
  uint64_t in_shard = 0, total = 0;
  for (size_t i = 0; i < manifest.size(); ++i) {
    const uint64_t b = bytes_of(manifest[i]);
    if (in_shard > 0 && in_shard + b > o.max_shard_bytes) {
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
    const std::string path = (fs::path(dir) / name).string();
    std::vector<io::TensorToWrite> list;
    for (size_t i : shards[s]) {
      list.push_back({manifest[i].name, manifest[i].dtypes.front(), manifest[i].shape, nullptr});
      weight_map[manifest[i].name] = name;
    }
    if (o.sparse) {
      io::write_safetensors(path, list, {{"format", "pt"}});
    } else {
      io::write_safetensors_streaming(
          path, list,
          [&](size_t k, uint8_t* out) {
            const auto& spec = manifest[shards[s][k]];
            const DType dt = spec.dtypes.front();
            const size_t n = bytes_of(spec) / dtype_size(dt);
            ThreadPool::global().parallel_for(n, 1 << 16, [&](size_t b, size_t e) {
              fill_synthetic(spec, o.seed, dt, int64_t(b), int64_t(e - b), out + b * dtype_size(dt));
            });
          },
          {{"format", "pt"}});
    }
    spdlog::debug("wrote {} ({} tensors)", name, list.size());
  }
  write_json(fs::path(dir) / "model.safetensors.index.json",
             {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}});
  return total;
}

}  // namespace orchid::model
