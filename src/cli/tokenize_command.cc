// `orchid tokenize` and `orchid detokenize`: the tokenizer of a MODEL (synthetic:* -> the built-in
// vocabulary, a directory -> its tokenizer.json when present) from the command line. --jsonl handles many
// documents in one run (one JSON value per line in, one per line out), which is how the oracle tests drive
// it.
#include <nlohmann/json.hpp>

#include <cstdio>
#include <string>
#include <vector>

#include "cli/allowed_specials.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/parse.h"
#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace orchid::cli {
namespace {

using nlohmann::json;
using tokenizer::Tokenizer;

struct TokenizeOptions {
  std::string model, text, file, allow_special;
  bool jsonl = false;
};

struct DetokenizeOptions {
  std::string model, ids, file;
  bool jsonl = false, hex = false, stream = false;
};

void write(std::string_view s) {
  std::fwrite(s.data(), 1, s.size(), stdout);
}

std::vector<std::string_view> lines_of(std::string_view text) {
  std::vector<std::string_view> lines;
  for (size_t pos = 0; pos < text.size();) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    lines.push_back(text.substr(pos, eol - pos));
    pos = eol + 1;
  }
  return lines;
}

std::string ids_json(const std::vector<int32_t>& ids) {
  std::string out = "[";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) out += ',';
    out += std::to_string(ids[i]);
  }
  out += "]\n";
  return out;
}

void run_tokenize(const TokenizeOptions& o) {
  auto tok = Tokenizer::for_model(o.model);
  const std::string input = o.file.empty() ? o.text : read_text_file(o.file, "--file");
  const auto allowed = allowed_specials(*tok, o.allow_special);
  if (!o.jsonl) {
    write(ids_json(tok->encode(input, allowed)));
    return;
  }
  const std::string where = o.file.empty() ? std::string("--text") : o.file;
  size_t line_no = 0;
  for (std::string_view line : lines_of(input)) {
    ++line_no;
    if (line.empty()) continue;
    json doc = json::parse(line, nullptr, false);
    if (!doc.is_string()) fail("{}:{}: --jsonl expects one JSON string per line", where, line_no);
    write(ids_json(tok->encode(doc.get_ref<const std::string&>(), allowed)));
  }
}

std::vector<int32_t> to_ids(const std::vector<int64_t>& values, std::string_view what) {
  std::vector<int32_t> ids;
  ids.reserve(values.size());
  for (int64_t v : values) {
    if (v < INT32_MIN || v > INT32_MAX) fail("{}: token id {} is out of range", what, v);
    ids.push_back(static_cast<int32_t>(v));
  }
  return ids;
}

// One decoded id list as printed: raw bytes (plain), or one JSON value (jsonl, stream).
std::string render(const Tokenizer& tok, const std::vector<int32_t>& ids, const DetokenizeOptions& o) {
  if (o.stream) {
    tokenizer::IncrementalDetokenizer detok(tok);
    json deltas = json::array();
    for (int32_t id : ids) deltas.push_back(detok.push(id));
    deltas.push_back(detok.flush());
    return deltas.dump() + "\n";
  }
  const std::string bytes = tok.decode(ids);
  if (o.hex) {
    std::string hex;
    for (unsigned char c : bytes) hex += fmt::format("{:02x}", c);
    return o.jsonl ? json(hex).dump() + "\n" : hex + "\n";
  }
  if (o.jsonl) return json(tokenizer::to_valid_utf8(bytes)).dump() + "\n";
  return bytes + "\n";
}

void run_detokenize(const DetokenizeOptions& o) {
  auto tok = Tokenizer::for_model(o.model);
  if (!o.jsonl) {
    const std::string list = o.file.empty() ? o.ids : read_text_file(o.file, "--file");
    const char* what = o.file.empty() ? "--ids" : "--file";
    write(render(*tok, to_ids(parse_int_list(list, what), what), o));
    return;
  }
  if (o.file.empty()) fail("--jsonl needs --file (one JSON array of ids per line)");
  const std::string input = read_text_file(o.file, "--file");
  size_t line_no = 0;
  for (std::string_view line : lines_of(input)) {
    ++line_no;
    if (line.empty()) continue;
    const std::string what = fmt::format("{}:{}", o.file, line_no);
    write(render(*tok, to_ids(parse_int_list(line, what), what), o));
  }
}

}  // namespace

void add_tokenize_command(CLI::App& app) {
  auto t = std::make_shared<TokenizeOptions>();
  auto* tc = app.add_subcommand("tokenize", "Print the token ids of a text as a JSON array");
  tc->add_option("model", t->model, "synthetic:* (built-in vocabulary) or a model directory")->required();
  auto* text = tc->add_option("--text", t->text, "The text to encode");
  auto* file = tc->add_option("--file", t->file, "Read the text from this file (bytes as they are)");
  text->excludes(file);
  tc->add_flag("--jsonl", t->jsonl, "The input is JSON Lines of strings; print one id array per line");
  tc->add_option("--allow-special", t->allow_special, kAllowSpecialHelp);
  tc->callback([t, text, file] {
    if (text->count() == 0 && file->count() == 0) fail("tokenize: give --text or --file");
    run_tokenize(*t);
  });

  auto d = std::make_shared<DetokenizeOptions>();
  auto* dc = app.add_subcommand("detokenize", "Print the text of token ids");
  dc->add_option("model", d->model, "synthetic:* (built-in vocabulary) or a model directory")->required();
  auto* ids = dc->add_option("--ids", d->ids, "Token ids: 1,2,3 or a JSON array");
  auto* dfile = dc->add_option("--file", d->file, "Read the ids from this file");
  ids->excludes(dfile);
  dc->add_flag("--jsonl", d->jsonl,
               "The file has one JSON array of ids per line; print one JSON string each");
  dc->add_flag("--hex", d->hex, "Print the decoded bytes in hex");
  dc->add_flag("--stream", d->stream,
               "Print the incremental detokenizer's deltas (one per id, then the flush) as a JSON array");
  dc->callback([d, ids, dfile] {
    if (ids->count() == 0 && dfile->count() == 0) fail("detokenize: give --ids or --file");
    run_detokenize(*d);
  });
}

}  // namespace orchid::cli
