#include "harmony/stream_parser.h"

#include <fmt/format.h>

#include "core/error.h"
#include "harmony/tokens.h"
#include "harmony/utf8.h"

namespace orchid::harmony {

StreamParser::StreamParser(std::shared_ptr<const tokenizer::Tokenizer> tok, std::optional<Role> role,
                           bool strict)
    : tok_(std::move(tok)),
      strict_(strict),
      fallback_role_(role.value_or(Role::kAssistant)),
      next_role_(role),
      state_(role ? StreamState::kHeader : StreamState::kExpectStart) {
  ORCHID_CHECK(tok_ != nullptr, "StreamParser needs a tokenizer");
}

void StreamParser::recover(std::string what) {
  recoveries_.push_back(Recovery{index_, std::move(what)});
}

void StreamParser::process(int32_t token) {
  index_ = tokens_.size();
  tokens_.push_back(token);
  switch (state_) {
    case StreamState::kExpectStart:
      on_expect_start(token);
      break;
    case StreamState::kHeader:
      on_header(token);
      break;
    case StreamState::kContent:
      on_content(token);
      break;
  }
}

void StreamParser::process_eos() {
  if (state_ == StreamState::kContent) {
    finish_content();
  } else if (state_ == StreamState::kHeader) {
    if (strict_) fail("harmony: the output ended inside a message header");
    index_ = tokens_.size();
    header_ended_early("the output ended inside a message header");
  }
}

void StreamParser::on_expect_start(int32_t token) {
  if (token == kStartId) {
    state_ = StreamState::kHeader;
    header_tokens_.clear();
    return;
  }
  if (strict_) fail("harmony: unexpected token {} while expecting the start token {}", token, kStartId);
  if (is_parser_stop(token)) {
    recover(fmt::format("stray stop token {} between messages ignored", token));
    return;
  }
  // gpt-oss sometimes continues with "<|channel|>final<|message|>..." without "<|start|>assistant": read it
  // as a new message of the turn's role.
  recover(fmt::format("missing <|start|> before token {}: a new {} message begins", token,
                      role_name(fallback_role_)));
  state_ = StreamState::kHeader;
  header_tokens_.clear();
  next_role_ = fallback_role_;
  on_header(token);
}

std::string StreamParser::header_text() {
  std::string bytes;
  for (int32_t id : header_tokens_) {
    if (tok_->decode_append(id, &bytes)) continue;
    if (strict_) fail("harmony: could not decode the message header: unknown token {}", id);
    recover(fmt::format("unknown token {} in a message header read as U+FFFD", id));
    bytes += kReplacementChar;
  }
  if (!check_utf8(bytes).valid) {
    if (strict_) fail("harmony: could not decode the message header: invalid UTF-8");
    recover("invalid UTF-8 in a message header replaced by U+FFFD");
    bytes = utf8_lossy(bytes);
  }
  return bytes;
}

void StreamParser::on_header(int32_t token) {
  if (token == kMessageId) {
    HeaderParseOptions opt{next_role_, /*parse_recipient_and_type=*/true, !strict_, fallback_role_};
    HeaderParse hp = parse_header(header_text(), opt);
    for (std::string& r : hp.repairs) recover(std::move(r));
    if (hp.leftover) {
      if (strict_) fail("harmony: unexpected tokens remaining in message header: \"{}\"", *hp.leftover);
      recover(fmt::format("words \"{}\" in a message header kept as text", *hp.leftover));
    }
    header_ = std::move(hp.header);
    next_role_.reset();
    header_tokens_.clear();
    state_ = StreamState::kContent;
    content_ = hp.leftover.value_or("");
    last_delta_ = hp.leftover;
    poisoned_ = false;
    pending_bytes_.clear();
    return;
  }
  if (!strict_ && is_parser_stop(token)) {
    header_ended_early("a message ended before <|message|>");
    return;
  }
  header_tokens_.push_back(token);
}

void StreamParser::header_ended_early(const char* why) {
  // openai-harmony's non-strict rule: with a known role, the header words (after the channel) are the text
  // of the message ("I must refuse<|end|>"); a header after an explicit <|start|> is dropped.
  recover(why);
  if (next_role_ && !header_tokens_.empty()) {
    HeaderParseOptions opt{next_role_, /*parse_recipient_and_type=*/false, /*lenient=*/true, fallback_role_};
    HeaderParse hp = parse_header(header_text(), opt);
    for (std::string& r : hp.repairs) recover(std::move(r));
    Message m = Message::text(hp.header.author, hp.leftover.value_or(""));
    m.channel = hp.header.channel;
    messages_.push_back(std::move(m));
  }
  state_ = StreamState::kExpectStart;
  next_role_.reset();
  header_tokens_.clear();
}

void StreamParser::on_content(int32_t token) {
  if (is_parser_stop(token)) {
    finish_content();
    return;
  }
  if (poisoned_ || !tok_->decode_append(token, &pending_bytes_)) {
    poisoned_ = true;
    last_delta_.reset();
    return;
  }
  const Utf8Status st = check_utf8(pending_bytes_);
  if (st.valid) {
    content_ += pending_bytes_;
    last_delta_ = std::move(pending_bytes_);
    pending_bytes_.clear();
    return;
  }
  // Emit the valid prefix; replace at most one bad sequence per token (as openai-harmony does); keep the
  // bytes of an incomplete character for the next token.
  std::string delta = pending_bytes_.substr(0, st.valid_up_to);
  size_t consumed = st.valid_up_to;
  if (st.error_len) {
    delta += kReplacementChar;
    consumed += *st.error_len;
  }
  pending_bytes_.erase(0, consumed);
  content_ += delta;
  last_delta_ = delta.empty() ? std::nullopt : std::optional<std::string>(std::move(delta));
}

void StreamParser::finish_content() {
  std::string text = std::move(content_);
  if (poisoned_) text += kReplacementChar;
  text += utf8_lossy(pending_bytes_);
  Message m = Message::text(header_.author, std::move(text));
  m.recipient = header_.recipient;
  m.channel = header_.channel;
  m.content_type = header_.content_type;
  messages_.push_back(std::move(m));
  state_ = StreamState::kExpectStart;
  content_.clear();
  last_delta_.reset();
  poisoned_ = false;
  pending_bytes_.clear();
}

std::optional<Role> StreamParser::current_role() const {
  return state_ == StreamState::kContent ? std::optional<Role>(header_.author.role) : next_role_;
}

std::optional<std::string> StreamParser::current_channel() const {
  return state_ == StreamState::kContent ? header_.channel : std::nullopt;
}

std::optional<std::string> StreamParser::current_recipient() const {
  return state_ == StreamState::kContent ? header_.recipient : std::nullopt;
}

std::optional<std::string> StreamParser::current_content_type() const {
  return state_ == StreamState::kContent ? header_.content_type : std::nullopt;
}

const std::optional<std::string>& StreamParser::current_author_name() const {
  static const std::optional<std::string> kNone;
  return state_ == StreamState::kContent ? header_.author.name : kNone;
}

const std::string& StreamParser::current_content() const {
  static const std::string kEmpty;
  return state_ == StreamState::kContent ? content_ : kEmpty;
}

ParseResult parse_completion(std::shared_ptr<const tokenizer::Tokenizer> tok, std::span<const int32_t> ids,
                             std::optional<Role> role, bool strict) {
  StreamParser parser(std::move(tok), role, strict);
  for (int32_t id : ids) parser.process(id);
  parser.process_eos();
  return ParseResult{parser.messages(), parser.recoveries()};
}

std::optional<std::string> function_call_name(const Message& message) {
  if (!message.recipient || !message.recipient->starts_with("functions.")) return std::nullopt;
  return message.recipient->substr(std::string_view("functions.").size());
}

MessageKind classify_message(const Message& m) {
  if (m.author.role != Role::kAssistant) return MessageKind::kOther;
  if (m.recipient && *m.recipient != "all" && *m.recipient != "user" && *m.recipient != "assistant") {
    if (m.recipient->starts_with("functions.")) return MessageKind::kFunctionCall;
    if (m.recipient->starts_with("browser.") || *m.recipient == "python") return MessageKind::kBuiltinCall;
    return MessageKind::kOther;
  }
  if (m.channel == "final") return MessageKind::kFinal;
  if (m.channel == "analysis") return MessageKind::kReasoning;
  if (m.channel == "commentary") return MessageKind::kPreamble;
  return MessageKind::kOther;
}

}  // namespace orchid::harmony
