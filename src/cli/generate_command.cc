// orchid generate MODEL --prompt-ids 1,2,3 --max-tokens N [--temperature T ...] [--print-ids]
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdio>
#include <unordered_set>

#include "cli/backend_options.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/parse.h"
#include "runtime/sequence_runner.h"

namespace orchid::cli {

namespace {
struct GenerateArgs {
  std::string model, prompt_ids, stop_ids;
  int32_t max_tokens = 16;
  bool print_ids = false, ignore_eos = false;
  runtime::SamplingParams sampling;
  int64_t seed = 0;
  BackendOptions backend;
};
}  // namespace

void add_generate_command(CLI::App& app) {
  auto args = std::make_shared<GenerateArgs>();
  auto* cmd = app.add_subcommand("generate", "Generate tokens from a prompt");
  cmd->add_option("MODEL", args->model, "model directory or synthetic:tiny|20b|120b[@seed]")->required();
  cmd->add_option("--prompt-ids", args->prompt_ids, "comma-separated prompt token ids")->required();
  cmd->add_option("--max-tokens", args->max_tokens, "tokens to generate")
      ->check(CLI::Range(1, 1 << 24))
      ->capture_default_str();
  cmd->add_option("--temperature", args->sampling.temperature, "0: greedy")
      ->check(CLI::Range(0.0, 100.0))
      ->capture_default_str();
  cmd->add_option("--top-k", args->sampling.top_k, "0: off")->check(CLI::Range(0, 1 << 30));
  cmd->add_option("--top-p", args->sampling.top_p, "1: off")->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--min-p", args->sampling.min_p, "0: off")->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--seed", args->seed, "sampling seed")->check(CLI::Range(int64_t(0), INT64_MAX));
  cmd->add_option("--stop-ids", args->stop_ids,
                  "comma-separated ids that end generation (default: the model's eos ids)");
  cmd->add_flag("--ignore-eos", args->ignore_eos, "do not stop at eos/stop ids");
  cmd->add_flag("--print-ids", args->print_ids, "print the generated ids as a JSON array on the last line");
  args->backend.add_flags(cmd);
  cmd->callback([args] {
    std::vector<int32_t> prompt;
    for (int64_t v : parse_int_list(args->prompt_ids, "--prompt-ids")) {
      if (v < 0 || v > INT32_MAX) fail("--prompt-ids: {} is not a valid token id", v);
      prompt.push_back(int32_t(v));
    }
    if (prompt.empty()) fail("--prompt-ids: the prompt is empty");
    auto backend = args->backend.create(args->model);
    std::unordered_set<int64_t> stops;
    if (!args->stop_ids.empty()) {
      for (int64_t v : parse_int_list(args->stop_ids, "--stop-ids")) stops.insert(v);
    } else {
      for (int64_t v : backend->model_config().eos_token_ids) stops.insert(v);
    }
    auto params = args->sampling;
    params.seed = uint64_t(args->seed);
    runtime::SequenceRunner runner(*backend, params);
    std::vector<int32_t> out;
    const auto t0 = std::chrono::steady_clock::now();
    auto step = runner.feed(prompt, true);
    const auto t1 = std::chrono::steady_clock::now();
    for (;;) {
      const int32_t id = step.samples.at(0).token;
      out.push_back(id);
      if (int32_t(out.size()) >= args->max_tokens || (!args->ignore_eos && stops.count(id))) break;
      step = runner.feed({id}, true);
    }
    const auto t2 = std::chrono::steady_clock::now();
    const double prefill_s = std::chrono::duration<double>(t1 - t0).count();
    const double decode_s = std::chrono::duration<double>(t2 - t1).count();
    spdlog::info("prefill {} tokens in {:.3f} s; {} tokens generated, {:.1f} tok/s decode", prompt.size(),
                 prefill_s, out.size(), out.size() > 1 ? double(out.size() - 1) / decode_s : 0.0);
    std::string json = "[";
    for (size_t i = 0; i < out.size(); ++i) json += (i ? "," : "") + std::to_string(out[i]);
    json += "]";
    if (!args->print_ids) std::printf("generated %zu tokens\n", out.size());
    std::printf("%s\n", json.c_str());
  });
}

}  // namespace orchid::cli
