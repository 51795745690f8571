// orchid inspect MODEL: the config, the tensor table and a memory estimate per weight format.
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>

#include "cli/commands.h"
#include "core/error.h"
#include "io/checkpoint.h"
#include "model/loader.h"
#include "model/manifest.h"

namespace orchid::cli {

namespace {
std::string gib(uint64_t bytes) {
  return fmt::format("{:.2f} GiB", double(bytes) / double(1ull << 30));
}
}  // namespace

void add_inspect_command(CLI::App& app) {
  auto model = std::make_shared<std::string>();
  auto tensors = std::make_shared<bool>(false);
  auto* cmd = app.add_subcommand("inspect", "Print a model's config, tensor table and memory estimate");
  cmd->add_option("MODEL", *model, "model directory or synthetic:tiny|20b|120b[@seed]")->required();
  cmd->add_flag("--tensors", *tensors, "list every tensor (default: the first layer's and the global ones)");
  cmd->callback([model, tensors] {
    const auto t0 = std::chrono::steady_clock::now();
    const model::ModelRef ref = model::parse_model_ref(*model);
    const model::ModelConfig c = model::load_config(ref);
    const auto manifest = model::gpt_oss_manifest(c);
    io::Checkpoint ck;
    if (!ref.synthetic)  // headers only: nothing is read but the safetensors headers (and packed rows)
      ck = model::open_checkpoint(ref.dir, manifest);
    const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    std::printf("model: %s\n", c.name.c_str());
    std::printf("config (transformers 5 style):\n%s\n",
                c.to_json(model::ConfigStyle::kTransformers5).dump(2).c_str());
    std::printf("\ntensors (%zu in the manifest%s):\n", manifest.size(),
                ref.synthetic ? ", synthetic: generated in memory when run" : "");
    std::printf("  %-52s %-22s %-6s %12s  %s\n", "name", "shape", "dtype", "bytes", "file");
    uint64_t total = 0;
    for (const auto& s : manifest) {
      DType dt = s.dtypes.front();
      std::string file = "-";
      uint64_t bytes;
      if (!ref.synthetic) {
        const auto& t = ck.get(s.name);
        dt = t.dtype;
        bytes = t.nbytes;
        file = t.source.substr(t.source.find_last_of('/') + 1);
      } else {
        uint64_t n = 1;
        for (int64_t d : s.shape) n *= uint64_t(d);
        bytes = n * dtype_size(dt);
      }
      total += bytes;
      if (*tensors || s.layer <= 0)
        std::printf("  %-52s %-22s %-6s %12llu  %s\n", s.name.c_str(), io::shape_str(s.shape).c_str(),
                    std::string(dtype_name(dt)).c_str(), (unsigned long long)bytes, file.c_str());
    }
    if (!*tensors && c.num_layers > 1)
      std::printf("  ... layers 1..%lld alike (--tensors lists all)\n", (long long)c.num_layers - 1);
    std::printf("\ncheckpoint: %s in %zu tensors\n", gib(total).c_str(), manifest.size());
    std::printf("memory estimate (weights; attention, router, embeddings and lm_head in BF16):\n");
    for (const char* f : {"mxfp4", "fp8", "bf16"})
      std::printf("  --weights %-6s %s\n", f, gib(model::weight_bytes(c, f)).c_str());
    const uint64_t kv_full = uint64_t(c.num_full_layers()) * uint64_t(c.kv_dim()) * 2 * 2;
    const uint64_t kv_sliding = uint64_t(c.num_sliding_layers()) * uint64_t(c.kv_dim()) * 2 * 2;
    std::printf(
        "KV cache (BF16): %llu B per token in full-attention layers; sliding layers keep %lld tokens "
        "(%llu B per token while in the window)\n",
        (unsigned long long)kv_full, (long long)c.sliding_window, (unsigned long long)kv_sliding);
    std::printf("opened in %.3f s\n", load_s);
  });
}

}  // namespace orchid::cli
