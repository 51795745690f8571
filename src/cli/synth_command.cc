// orchid synth DIR --preset tiny|20b|120b [--seed N]: writes a Hugging Face-layout gpt-oss checkpoint with
// deterministic random weights (the same as `synthetic:PRESET@N`), MXFP4 experts, sharded with an index, and
// the tokenizer files of the built-in vocabulary, so that the directory is a complete model.
#include <spdlog/spdlog.h>

#include "cli/commands.h"
#include "model/synthetic_writer.h"
#include "tokenizer/hf_tokenizer_files.h"
#include "tokenizer/vocabulary.h"

namespace orchid::cli {

namespace {
struct SynthArgs {
  std::string dir, preset = "tiny", style = "4";
  int64_t seed = 0;
  double shard_gb = 5.0;
};
}  // namespace

void add_synth_command(CLI::App& app) {
  auto a = std::make_shared<SynthArgs>();
  auto* cmd = app.add_subcommand("synth", "Write a synthetic gpt-oss checkpoint in the Hugging Face layout");
  cmd->add_option("DIR", a->dir, "output directory (created; must be empty if it exists)")->required();
  cmd->add_option("--preset", a->preset, "tiny, 20b or 120b")->capture_default_str();
  cmd->add_option("--seed", a->seed, "weight seed")
      ->check(CLI::Range(int64_t(0), INT64_MAX))
      ->capture_default_str();
  cmd->add_option("--config-style", a->style,
                  "config.json as written by transformers 4 (rope_scaling) or 5 (rope_parameters)")
      ->check(CLI::IsMember({"4", "5"}))
      ->capture_default_str();
  cmd->add_option("--shard-size-gb", a->shard_gb, "largest shard in GB")
      ->check(CLI::Range(0.000001, 1000.0))
      ->capture_default_str();
  cmd->callback([a] {
    model::SyntheticWriteOptions o;
    o.seed = uint64_t(a->seed);
    o.style = a->style == "5" ? model::ConfigStyle::kTransformers5 : model::ConfigStyle::kTransformers4;
    o.max_shard_bytes = uint64_t(a->shard_gb * 1e9);
    const uint64_t total = model::write_synthetic_checkpoint(a->dir, model::preset_config(a->preset), o);
    tokenizer::write_hf_tokenizer_files(a->dir, tokenizer::builtin_vocabulary());
    spdlog::info("synthetic {} (seed {}) written to {}: {:.2f} GB", a->preset, o.seed, a->dir,
                 double(total) / 1e9);
  });
}

}  // namespace orchid::cli
