// Model output tokens -> Harmony messages, one token at a time, with the same states, messages and content
// deltas as openai-harmony 0.0.8's StreamableParser.
//
// Strict mode raises orchid::Error exactly where openai-harmony's strict parser raises. Lenient mode never
// throws on any token sequence: where openai-harmony's non-strict parser already recovers (text before
// <|message|> ended by a stop token) it does the same, and where openai-harmony would still raise it repairs
// the output as described in docs/design.md ("Harmony: lenient parsing") and records a Recovery.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "harmony/header.h"
#include "harmony/message.h"
#include "tokenizer/tokenizer.h"

namespace orchid::harmony {

enum class StreamState { kExpectStart, kHeader, kContent };

struct Recovery {
  size_t token_index = 0;  // index of the token fed when it happened; tokens().size() for end of stream
  std::string what;
};

class StreamParser {
 public:
  // `role`: the role whose turn the prompt opened (usually assistant: the prompt ends with
  // "<|start|>assistant"); nullopt when the output starts with <|start|> itself.
  StreamParser(std::shared_ptr<const tokenizer::Tokenizer> tok, std::optional<Role> role, bool strict = true);

  // Strict mode throws orchid::Error on malformed output; the parser is not usable after that.
  void process(int32_t token);
  // End of output (a stop token, max_tokens, ...): completes the message in progress.
  void process_eos();

  const std::vector<Message>& messages() const { return messages_; }
  const std::vector<int32_t>& tokens() const { return tokens_; }
  const std::vector<Recovery>& recoveries() const { return recoveries_; }
  StreamState state() const { return state_; }
  // Text decoded by the last token of the current message; nullopt when it decoded nothing (bytes of a
  // character still incomplete) and between messages.
  const std::optional<std::string>& last_content_delta() const { return last_delta_; }
  std::optional<Role> current_role() const;
  std::optional<std::string> current_channel() const;
  std::optional<std::string> current_recipient() const;
  std::optional<std::string> current_content_type() const;
  const std::optional<std::string>& current_author_name() const;
  // The text of the current message so far (without bytes of an incomplete character); "" between messages.
  const std::string& current_content() const;

 private:
  void on_expect_start(int32_t token);
  void on_header(int32_t token);
  void on_content(int32_t token);
  void begin_content();
  void finish_content();
  void header_ended_early(const char* why);
  std::string header_text();
  void recover(std::string what);

  std::shared_ptr<const tokenizer::Tokenizer> tok_;
  bool strict_;
  Role fallback_role_;
  std::optional<Role> next_role_;
  StreamState state_;
  std::vector<int32_t> tokens_;
  std::vector<Message> messages_;
  std::vector<Recovery> recoveries_;
  size_t index_ = 0;  // of the token being processed (tokens_.size() at the end of stream)
  std::vector<int32_t> header_tokens_;
  ParsedHeader header_;
  std::string content_;
  // An unknown id makes the rest of the message undecodable: openai-harmony keeps such ids pending and
  // writes the whole run as one U+FFFD when the message ends.
  bool poisoned_ = false;
  std::string pending_bytes_;  // bytes of an incomplete (or not yet reported bad) UTF-8 sequence
  std::optional<std::string> last_delta_;
};

struct ParseResult {
  std::vector<Message> messages;
  std::vector<Recovery> recovered;  // always empty in strict mode
};

// Feeds every id and the end of stream (openai-harmony's parse_messages_from_completion_tokens). Works
// with or without the trailing stop token.
ParseResult parse_completion(std::shared_ptr<const tokenizer::Tokenizer> tok, std::span<const int32_t> ids,
                             std::optional<Role> role, bool strict);

// What a completed assistant message means to a server (messages of other roles are kOther).
enum class MessageKind {
  kFinal,         // channel final: the answer
  kReasoning,     // channel analysis, no recipient: chain of thought
  kPreamble,      // commentary without recipient: a user-visible plan before tool calls
  kFunctionCall,  // recipient functions.NAME
  kBuiltinCall,   // recipient browser.* or python
  kOther,
};
MessageKind classify_message(const Message& message);
// NAME for a recipient "functions.NAME", nullopt otherwise.
std::optional<std::string> function_call_name(const Message& message);

}  // namespace orchid::harmony
