// orchid generate MODEL (--prompt TEXT | --prompt-file F | --prompt-ids 1,2,3) [--allow-special S]
//                 --max-tokens N [--temperature T ...] [--stop TEXT ...] [--print-ids]
// Runs through the engine (continuous batching, paged KV cache), exactly as the server does. A text prompt is
// encoded with the model's tokenizer; the generated text is printed as it is generated, or the ids with
// --print-ids.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "cli/allowed_specials.h"
#include "cli/backend_options.h"
#include "cli/commands.h"
#include "cli/default_model.h"
#include "cli/engine_setup.h"
#include "core/error.h"
#include "core/parse.h"
#include "engine/engine.h"
#include "tokenizer/engine_text_decoder.h"
#include "tokenizer/tokenizer.h"

namespace orchid::cli {

namespace {
struct GenerateArgs {
  std::string model, prompt, prompt_file, prompt_ids, allow_special, stop_ids;
  std::vector<std::string> stop;
  int32_t max_tokens = 16, min_tokens = 0;
  bool print_ids = false, ignore_eos = false, no_prefix_caching = false;
  runtime::SamplingParams sampling;
  int64_t seed = 0;
  BackendOptions backend;  // also --max-num-seqs, --max-num-batched-tokens, --max-model-len, --block-size
};

void write(std::string_view s) {
  std::fwrite(s.data(), 1, s.size(), stdout);
  std::fflush(stdout);
}

// The prompt ids from whichever of --prompt, --prompt-file and --prompt-ids was given (exactly one).
std::vector<int32_t> prompt_ids(const GenerateArgs& a, const CLI::App& cmd,
                                const std::shared_ptr<const tokenizer::Tokenizer>& tok) {
  const size_t given = cmd.count("--prompt") + cmd.count("--prompt-file") + cmd.count("--prompt-ids");
  if (given != 1) fail("generate: give exactly one of --prompt, --prompt-file or --prompt-ids");
  if (cmd.count("--prompt-ids")) {
    if (cmd.count("--allow-special")) fail("--allow-special applies to --prompt and --prompt-file, not ids");
    std::vector<int32_t> ids;
    for (int64_t v : parse_int_list(a.prompt_ids, "--prompt-ids")) {
      if (v < 0 || v > INT32_MAX) fail("--prompt-ids: {} is not a valid token id", v);
      ids.push_back(int32_t(v));
    }
    if (ids.empty()) fail("--prompt-ids: the prompt is empty");
    return ids;
  }
  const bool from_file = cmd.count("--prompt-file") > 0;
  const std::string text = from_file ? read_text_file(a.prompt_file, "--prompt-file") : a.prompt;
  const auto allowed = allowed_specials(*tok, a.allow_special);
  std::vector<int32_t> ids = allowed.empty() ? tok->encode_ordinary(text) : tok->encode(text, allowed);
  if (ids.empty()) fail("{}: the prompt is empty", from_file ? "--prompt-file" : "--prompt");
  return ids;
}
}  // namespace

void add_generate_command(CLI::App& app) {
  auto args = std::make_shared<GenerateArgs>();
  auto* cmd = app.add_subcommand("generate", "Generate tokens from a prompt");
  cmd->add_option("MODEL", args->model,
                  "model directory or synthetic:tiny|20b|120b[@seed] (default: the trained tiny model, "
                  "models/orchid-tiny)");
  cmd->add_option("--prompt", args->prompt, "prompt text, encoded with the model's tokenizer");
  cmd->add_option("--prompt-file", args->prompt_file,
                  "read the prompt text from this file (bytes as they are)");
  cmd->add_option("--prompt-ids", args->prompt_ids, "comma-separated prompt token ids");
  cmd->add_option("--allow-special", args->allow_special, kAllowSpecialHelp);
  cmd->add_option("--max-tokens", args->max_tokens, "tokens to generate")
      ->check(CLI::Range(1, 1 << 24))
      ->capture_default_str();
  cmd->add_option("--min-tokens", args->min_tokens, "stop ids and eos are not drawn before this many tokens")
      ->check(CLI::Range(0, 1 << 24));
  cmd->add_option("--temperature", args->sampling.temperature, "0: greedy")
      ->check(CLI::Range(0.0, 100.0))
      ->capture_default_str();
  cmd->add_option("--top-k", args->sampling.top_k, "0: off")->check(CLI::Range(0, 1 << 30));
  cmd->add_option("--top-p", args->sampling.top_p, "1: off")->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--min-p", args->sampling.min_p, "0: off")->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--frequency-penalty", args->sampling.frequency_penalty, "OpenAI semantics")
      ->check(CLI::Range(-2.0, 2.0));
  cmd->add_option("--presence-penalty", args->sampling.presence_penalty, "OpenAI semantics")
      ->check(CLI::Range(-2.0, 2.0));
  cmd->add_option("--repetition-penalty", args->sampling.repetition_penalty, "1: off")
      ->check(CLI::Range(0.01, 100.0));
  cmd->add_option("--seed", args->seed, "sampling seed")->check(CLI::Range(int64_t(0), INT64_MAX));
  cmd->add_option("--stop-ids", args->stop_ids,
                  "comma-separated ids that end generation (default: the model's eos ids)");
  cmd->add_option("--stop", args->stop,
                  "a string that ends generation; the text is cut before it (repeatable)")
      ->check([](const std::string& s) { return s.empty() ? "a stop string may not be empty" : ""; });
  cmd->add_flag("--ignore-eos", args->ignore_eos, "do not stop at eos/stop ids");
  cmd->add_flag("--print-ids", args->print_ids,
                "print the generated ids as a JSON array instead of the generated text");
  cmd->add_flag("--no-enable-prefix-caching", args->no_prefix_caching,
                "do not reuse cached KV pages of prefixes");
  args->backend.add_flags(cmd);
  cmd->callback([args, cmd] {
    args->model = model_or_default(args->model);
    if (args->backend.run_as_worker(args->model)) return;
    engine::RequestSpec req;
    auto tok = tokenizer::Tokenizer::for_model(args->model);
    req.prompt = prompt_ids(*args, *cmd, tok);
    if (args->min_tokens > args->max_tokens)
      fail("--min-tokens: {} is more than --max-tokens ({})", args->min_tokens, args->max_tokens);
    // --dp N: the request goes to replica 0's engine; the others (sharing the experts, in lockstep) run
    // empty steps beside it.
    const auto backends = args->backend.create_replicas(args->model);
    const runtime::Backend& backend = *backends[0];
    auto config_for = [&](runtime::Backend& b) {
      engine::EngineConfig config;
      config.max_num_seqs = args->backend.max_num_seqs;
      config.async_scheduling = args->backend.async_scheduling();
      config.max_num_batched_tokens = args->backend.max_num_batched_tokens;
      config.enable_prefix_caching = !args->no_prefix_caching;
      config.speculative = args->backend.speculative();
      config.proposer = args->backend.draft_proposer(config.speculative, b);
      if (args->backend.max_model_len > 0) {  // else what the model and the KV pool allow
        const runtime::KvCacheSpec kv = b.kv_spec();
        config.max_model_len =
            int32_t(std::min<int64_t>({args->backend.max_model_len, int64_t(kv.num_full_pages) * kv.page_size,
                                       b.model_config().max_position_embeddings}));
      }
      return config;
    };

    req.sampling = args->sampling;
    req.seed = uint64_t(args->seed);
    req.max_tokens = args->max_tokens;
    req.min_tokens = args->min_tokens;
    req.ignore_eos = args->ignore_eos || !args->stop_ids.empty();  // explicit stop ids replace eos
    if (!args->ignore_eos && !args->stop_ids.empty()) {
      const int64_t vocab = backend.model_config().vocab_size;
      for (int64_t v : parse_int_list(args->stop_ids, "--stop-ids")) {
        if (v < 0 || v >= vocab) fail("--stop-ids: {} is outside the vocabulary [0, {})", v, vocab);
        req.stop_token_ids.push_back(int32_t(v));
      }
    }
    req.stop_strings = args->stop;
    // The decoder gives events their text (printed as it comes) and is what stop strings are matched on.
    if (!args->print_ids || !req.stop_strings.empty())
      req.decoder = std::make_unique<tokenizer::EngineTextDecoder>(tok);
    const size_t prompt_len = req.prompt.size();

    const auto serving = start_engines(backends, config_for);
    const auto t0 = std::chrono::steady_clock::now();
    auto stream = serving->submit(std::move(req));
    engine::RequestEvent all;
    auto t1 = t0;
    while (!all.finished()) {
      auto ev = stream->next(std::chrono::seconds(1));
      if (!ev) continue;
      if (all.token_ids.empty() && !ev->token_ids.empty()) t1 = std::chrono::steady_clock::now();
      if (!args->print_ids) write(ev->text);
      engine::merge_event(all, std::move(*ev));
    }
    const auto t2 = std::chrono::steady_clock::now();
    serving->stop();
    if (!args->print_ids) write("\n");
    if (all.finish == engine::FinishReason::kError) fail("generation failed: {}", all.error);

    const std::vector<int32_t>& out = all.token_ids;
    const double prefill_s = std::chrono::duration<double>(t1 - t0).count();
    const double decode_s = std::chrono::duration<double>(t2 - t1).count();
    spdlog::info("prefill {} tokens in {:.3f} s; {} tokens generated ({}), {:.1f} tok/s decode", prompt_len,
                 prefill_s, out.size(), engine::finish_reason_name(all.finish),
                 out.size() > 1 ? double(out.size() - 1) / decode_s : 0.0);
    if (!args->print_ids) return;
    std::string json = "[";
    for (size_t i = 0; i < out.size(); ++i) json += (i ? "," : "") + std::to_string(out[i]);
    json += "]\n";
    write(json);
  });
}

}  // namespace orchid::cli
