// Generated tokens -> what the OpenAI APIs show, following the gpt-oss serving conventions
// (shared/specs/harmony.md §6): analysis -> reasoning, final and commentary preambles -> message text,
// messages to functions.NAME (or any recipient that is not a built-in tool) -> function calls. The Harmony
// parser runs in lenient mode: whatever the model emits becomes some output, never an error.
//
// Output is a list of items, each opened, extended and closed by events, so the Chat Completions deltas and
// the Responses event sequence are both a direct translation of the same stream.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "harmony/stream_parser.h"
#include "runtime/backend.h"
#include "tokenizer/tokenizer.h"

namespace orchid::server {

enum class ItemKind { kReasoning, kMessage, kFunctionCall };

struct OutputItem {
  ItemKind kind = ItemKind::kMessage;
  std::string name;  // function name (kFunctionCall)
  std::string text;  // the reasoning, the message text, or the call's arguments
  bool done = false;
};

struct OutputEvent {
  enum class Type { kBegin, kDelta, kEnd };
  Type type = Type::kDelta;
  size_t item = 0;    // index into HarmonyOutput::items()
  std::string delta;  // kDelta only
  // The token that produced this delta is message text (its logprob belongs to the content).
  const runtime::SampledToken* logprob = nullptr;
};

class HarmonyOutput {
 public:
  // `forced_prefix`: header tokens the prompt already holds after "<|start|>assistant" (tool_choice), fed to
  // the parser first so the output continues them.
  HarmonyOutput(std::shared_ptr<const tokenizer::Tokenizer> tok,
                const std::vector<int32_t>& forced_prefix = {});

  // One generated token. Events are appended to `events`; `logprob` (may be null) must outlive them.
  void push(int32_t token, const runtime::SampledToken* logprob, std::vector<OutputEvent>* events);
  // The end of the output (stop token, max_tokens, abort): completes the message in progress; a header
  // left unfinished is dropped (a header is never text).
  void finish(std::vector<OutputEvent>* events);

  const std::vector<OutputItem>& items() const { return items_; }
  // Tokens of analysis messages, their headers and end tokens included.
  int32_t reasoning_tokens() const { return reasoning_tokens_; }
  bool has_function_calls() const;
  size_t num_recoveries() const { return parser_.recoveries().size(); }

 private:
  void after_token(std::vector<OutputEvent>* events, const runtime::SampledToken* logprob);
  void open_item(ItemKind kind, std::string name, std::vector<OutputEvent>* events);
  void close_with(const harmony::Message& m, std::vector<OutputEvent>* events);

  harmony::StreamParser parser_;
  std::vector<OutputItem> items_;
  std::optional<size_t> open_;  // the item of the message in progress
  std::vector<OutputEvent> prefix_events_;
  size_t messages_seen_ = 0;
  int32_t tokens_since_content_ = 0;  // header tokens of the message being started
  int32_t reasoning_tokens_ = 0;
};

// How the APIs classify a parsed header: recipient first, then channel.
ItemKind classify(const std::optional<std::string>& channel, const std::optional<std::string>& recipient,
                  std::string* function_name);

}  // namespace orchid::server
