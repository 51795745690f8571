// `orchid render FILE.json`: an OpenAI request (Chat Completions "messages" or Responses "input") as the
// Harmony prompt gpt-oss would see: the rendered text, then the token ids as a JSON array.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>

#include <fmt/chrono.h>
#include <fmt/format.h>

#include "cli/commands.h"
#include "core/error.h"
#include "harmony/json_text.h"
#include "harmony/message_json.h"
#include "harmony/openai_mapping.h"
#include "harmony/render.h"
#include "tokenizer/tokenizer.h"

namespace orchid::cli {
namespace {

struct RenderArgs {
  std::string file;
  std::string model;
  std::string format = "auto";
  std::string date;
  bool no_date = false;
  std::string effort;
};

std::string read_input(const std::string& path) {
  if (path == "-") return std::string(std::istreambuf_iterator<char>(std::cin), {});
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("{}: cannot open the file", path);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

std::string today_utc() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  return fmt::format("{:%Y-%m-%d}", fmt::gmtime(now));
}

harmony::Conversation to_conversation(const harmony::Json& j, const RenderArgs& args) {
  harmony::MappingOptions opt;
  if (!args.no_date) opt.date = args.date.empty() ? today_utc() : args.date;
  if (!args.effort.empty()) {
    auto e = harmony::effort_from_name(args.effort);
    if (!e) fail("--effort: '{}' is not low, medium or high", args.effort);
    opt.default_effort = *e;
  }
  std::string format = args.format;
  if (format == "auto") {
    if (j.is_object() && j.contains("input")) {
      format = "responses";
    } else if (j.is_object() && j.contains("messages")) {
      format = "chat";
    } else {
      fail("{}: expected a Chat Completions request (\"messages\") or a Responses request (\"input\")",
           args.file);
    }
  }
  if (format == "chat") return harmony::conversation_from_chat_request(j, opt);
  if (format == "responses") return harmony::conversation_from_responses_request(j, opt);
  if (format == "harmony") return harmony::conversation_from_json(j, args.file);
  fail("--format: '{}' is not auto, chat, responses or harmony", format);
}

void run_render(RenderArgs args) {
  const std::string text = read_input(args.file);
  if (args.file == "-") args.file = "stdin";
  // serde_json's number reading, so that schema defaults print as openai-harmony prints them.
  const harmony::Json j = harmony::parse_json(text, args.file);
  const harmony::Conversation conv = to_conversation(j, args);
  const harmony::Pieces pieces = harmony::render_for_completion(conv, harmony::Role::kAssistant);
  auto tok =
      args.model.empty() ? tokenizer::Tokenizer::builtin() : tokenizer::Tokenizer::for_model(args.model);
  const std::vector<int32_t> ids = harmony::pieces_ids(pieces, *tok);
  const std::string rendered = harmony::pieces_text(pieces);
  std::fwrite(rendered.data(), 1, rendered.size(), stdout);
  std::printf("\n[%s]\n", fmt::format("{}", fmt::join(ids, ", ")).c_str());
}

}  // namespace

void add_render_command(CLI::App& app) {
  auto args = std::make_shared<RenderArgs>();
  auto* cmd = app.add_subcommand("render", "Render an OpenAI chat or Responses request as a Harmony prompt");
  cmd->add_option("file", args->file, "request JSON file ('-' for stdin)")->required();
  cmd->add_option("--model", args->model, "model directory or synthetic:NAME (its tokenizer is used)");
  cmd->add_option("--format", args->format,
                  "auto, chat, responses, or harmony (openai-harmony's message JSON)")
      ->capture_default_str();
  cmd->add_option("--date", args->date, "conversation date YYYY-MM-DD (default: today, UTC)");
  cmd->add_flag("--no-date", args->no_date, "leave the date out of the system message");
  cmd->add_option("--effort", args->effort, "reasoning effort when the request names none (default: medium)");
  cmd->callback([args] { run_render(*args); });
}

}  // namespace orchid::cli
