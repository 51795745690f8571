// orchid layer MODEL --layer L --input X.npy --output Y.npy: one decoder layer alone on given hidden states
// (teacher forcing), for layer-by-layer comparison with a reference implementation
// (tools/gpu/layer_check.py).
#include <spdlog/spdlog.h>

#include "cli/backend_options.h"
#include "cli/commands.h"
#include "core/error.h"
#include "io/npy.h"

namespace orchid::cli {

namespace {
struct LayerArgs {
  std::string model, input, output, topk_out;
  std::vector<int64_t> layers;
  BackendOptions backend;
};
}  // namespace

void add_layer_command(CLI::App& app) {
  auto a = std::make_shared<LayerArgs>();
  auto* cmd = app.add_subcommand("layer", "Run single decoder layers on given hidden states (verification)");
  cmd->add_option("MODEL", a->model, "model directory or synthetic:tiny|20b|120b[@seed]")->required();
  cmd->add_option("--layer", a->layers,
                  "layer index (repeat for several; INPUT/OUTPUT get the index appended)")
      ->required();
  cmd->add_option("--input", a->input, "hidden states entering the layer, float32 .npy [n, hidden]")
      ->required();
  cmd->add_option("--output", a->output, "the layer's output hidden states, float32 .npy [n, hidden]")
      ->required();
  cmd->add_option("--topk-out", a->topk_out, "also write the experts each token chose, [n, k] (as float32)");
  a->backend.add_flags(cmd);
  cmd->callback([a] {
    if (a->backend.run_as_worker(a->model)) return;
    auto backend = a->backend.create(a->model);
    const int64_t H = backend->model_config().hidden_size;
    const bool many = a->layers.size() > 1;
    for (int64_t l : a->layers) {
      auto path = [&](const std::string& p) { return many ? p + "." + std::to_string(l) : p; };
      const auto in = io::read_npy(path(a->input));
      if (in.shape.size() != 2 || in.shape[1] != H)
        fail("--input {}: expected float32 [n, {}], got {} dims", path(a->input), H, in.shape.size());
      const int64_t n = in.shape[0];
      std::vector<int32_t> topk;
      const auto y = backend->run_layer(l, in.as_f32(), n, a->topk_out.empty() ? nullptr : &topk);
      io::write_npy_f32(path(a->output), y.data(), {n, H});
      if (!a->topk_out.empty()) {
        std::vector<float> f(topk.begin(), topk.end());
        io::write_npy_f32(path(a->topk_out), f.data(), {n, int64_t(topk.size()) / n});
      }
      spdlog::info("layer {}: {} positions", l, n);
    }
  });
}

}  // namespace orchid::cli
