// orchid forward MODEL --ids 1,2,3 --logits-out OUT.npy: float32 logits of every input position, [n, vocab].
#include <spdlog/spdlog.h>

#include "cli/backend_options.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/parse.h"
#include "io/npy.h"
#include "runtime/sequence_runner.h"

namespace orchid::cli {

namespace {
struct ForwardArgs {
  std::string model, ids, ids_file, out;
  int32_t chunk = 0;
  bool incremental = false;
  BackendOptions backend;
};
}  // namespace

void add_forward_command(CLI::App& app) {
  auto args = std::make_shared<ForwardArgs>();
  auto* cmd = app.add_subcommand("forward",
                                 "Run the model on token ids and write the logits of every position (.npy)");
  cmd->add_option("MODEL", args->model, "model directory or synthetic:tiny|20b|120b[@seed]")->required();
  auto* ids = cmd->add_option("--ids", args->ids, "comma-separated token ids");
  auto* file =
      cmd->add_option("--ids-file", args->ids_file, "file holding token ids (comma/space separated or JSON)");
  ids->excludes(file);
  cmd->add_option("--logits-out", args->out, "output .npy file, float32 [n, vocab]")->required();
  cmd->add_option("--chunk", args->chunk, "prefill chunk size in tokens (0: all at once)")
      ->check(CLI::Range(0, 1 << 30));
  cmd->add_flag("--incremental", args->incremental,
                "feed one token per step (decode path) instead of a prefill");
  args->backend.add_flags(cmd);
  cmd->callback([args] {
    if (args->backend.run_as_worker(args->model)) return;
    std::vector<int64_t> list;
    if (!args->ids.empty()) {
      list = parse_int_list(args->ids, "--ids");
    } else if (!args->ids_file.empty()) {
      std::string text = read_text_file(args->ids_file, "--ids-file");
      for (char& ch : text)
        if (ch == ' ' || ch == '\n' || ch == '\t' || ch == '\r') ch = ',';
      std::string cleaned;
      for (size_t i = 0; i < text.size(); ++i)
        if (!(text[i] == ',' && (cleaned.empty() || cleaned.back() == ',' || cleaned.back() == '[')))
          cleaned += text[i];
      while (!cleaned.empty() && cleaned.back() == ',') cleaned.pop_back();
      list = parse_int_list(cleaned, "--ids-file");
    } else {
      fail("forward: give --ids or --ids-file");
    }
    if (list.empty()) fail("forward: no token ids given");
    std::vector<int32_t> tokens;
    for (int64_t v : list) {
      if (v < 0 || v > INT32_MAX) fail("--ids: {} is not a valid token id", v);
      tokens.push_back(int32_t(v));
    }
    auto backend = args->backend.create(args->model);
    const int64_t vocab = backend->model_config().vocab_size;
    runtime::SequenceRunner runner(*backend);
    std::vector<float> logits;
    logits.reserve(tokens.size() * size_t(vocab));
    runner.feed(tokens, false, true, args->incremental ? 1 : args->chunk, &logits);
    io::write_npy_f32(args->out, logits.data(), {int64_t(tokens.size()), vocab});
    spdlog::info("wrote logits [{}, {}] to {}", tokens.size(), vocab, args->out);
  });
}

}  // namespace orchid::cli
