#include "server/harmony_output.h"

#include <spdlog/spdlog.h>

namespace orchid::server {

ItemKind classify(const std::optional<std::string>& channel, const std::optional<std::string>& recipient,
                  std::string* function_name) {
  if (recipient && *recipient != "assistant" && *recipient != "all") {
    const std::string& r = *recipient;
    // Built-in tools (browser.*, python) are not run by this server; a call to one is the model's own
    // business, shown as reasoning.
    if (r.starts_with("browser.") || r == "python") return ItemKind::kReasoning;
    constexpr std::string_view kPrefix = "functions.";
    *function_name = r.starts_with(kPrefix) ? r.substr(kPrefix.size()) : r;
    return ItemKind::kFunctionCall;
  }
  if (channel && *channel == "analysis") return ItemKind::kReasoning;
  return ItemKind::kMessage;  // final, commentary preambles, and anything a confused model invents
}

HarmonyOutput::HarmonyOutput(std::shared_ptr<const tokenizer::Tokenizer> tok,
                             const std::vector<int32_t>& forced_prefix)
    : parser_(std::move(tok), harmony::Role::kAssistant, /*strict=*/false) {
  for (int32_t t : forced_prefix) {
    parser_.process(t);
    ++tokens_since_content_;
  }
  // The forced call is already open; its events go out with the first generated token.
  if (!forced_prefix.empty()) after_token(&prefix_events_, nullptr);
}

bool HarmonyOutput::has_function_calls() const {
  for (const auto& it : items_)
    if (it.kind == ItemKind::kFunctionCall) return true;
  return false;
}

void HarmonyOutput::open_item(ItemKind kind, std::string name, std::vector<OutputEvent>* events) {
  OutputItem item;
  item.kind = kind;
  item.name = std::move(name);
  items_.push_back(std::move(item));
  open_ = items_.size() - 1;
  events->push_back({OutputEvent::Type::kBegin, *open_, {}, nullptr});
}

void HarmonyOutput::close_with(const harmony::Message& m, std::vector<OutputEvent>* events) {
  OutputItem& item = items_[*open_];
  // Finishing may add text the deltas did not carry (a dangling partial character becomes U+FFFD).
  const std::string full = m.text_content();
  if (full.size() > item.text.size() && full.compare(0, item.text.size(), item.text) == 0) {
    events->push_back({OutputEvent::Type::kDelta, *open_, full.substr(item.text.size()), nullptr});
    item.text = full;
  }
  item.done = true;
  events->push_back({OutputEvent::Type::kEnd, *open_, {}, nullptr});
  open_.reset();
}

void HarmonyOutput::after_token(std::vector<OutputEvent>* events, const runtime::SampledToken* logprob) {
  // 1. Messages completed by this token.
  const auto& msgs = parser_.messages();
  while (messages_seen_ < msgs.size()) {
    const harmony::Message& m = msgs[messages_seen_++];
    if (!open_) {
      // A message that never reached its content (lenient recovery of a broken header): show it whole.
      std::string name;
      const ItemKind kind = classify(m.channel, m.recipient, &name);
      if (kind == ItemKind::kReasoning) reasoning_tokens_ += tokens_since_content_;
      open_item(kind, std::move(name), events);
    }
    close_with(m, events);
    tokens_since_content_ = 0;
  }
  // 2. A message whose content begins.
  bool opened_now = false;
  if (parser_.state() == harmony::StreamState::kContent && !open_) {
    opened_now = true;
    std::string name;
    const ItemKind kind = classify(parser_.current_channel(), parser_.current_recipient(), &name);
    if (kind == ItemKind::kReasoning) reasoning_tokens_ += tokens_since_content_;
    tokens_since_content_ = 0;
    open_item(kind, std::move(name), events);
  }
  // 3. Its text.
  if (open_ && parser_.state() == harmony::StreamState::kContent) {
    const auto& delta = parser_.last_content_delta();
    OutputItem& item = items_[*open_];
    // Every content token of a message carries its logprob, also one that completes no character yet (not
    // the <|message|> that opened it).
    const runtime::SampledToken* lp = item.kind == ItemKind::kMessage && !opened_now ? logprob : nullptr;
    if (delta && !delta->empty()) {
      item.text += *delta;
      events->push_back({OutputEvent::Type::kDelta, *open_, *delta, lp});
    } else if (lp) {
      events->push_back({OutputEvent::Type::kDelta, *open_, {}, lp});
    }
  }
}

void HarmonyOutput::push(int32_t token, const runtime::SampledToken* logprob,
                         std::vector<OutputEvent>* events) {
  if (!prefix_events_.empty()) {
    for (auto& e : prefix_events_) events->push_back(std::move(e));
    prefix_events_.clear();
  }
  const bool in_content = parser_.state() == harmony::StreamState::kContent && open_;
  const bool was_reasoning = in_content && items_[*open_].kind == ItemKind::kReasoning;
  try {
    parser_.process(token);
  } catch (const std::exception& e) {
    // Lenient parsing does not throw; if it ever does, the token is dropped rather than the request.
    spdlog::warn("harmony output: token {} ignored: {}", token, e.what());
    return;
  }
  if (was_reasoning) {
    ++reasoning_tokens_;
  } else if (!in_content) {
    ++tokens_since_content_;
  }
  after_token(events, logprob);
}

void HarmonyOutput::finish(std::vector<OutputEvent>* events) {
  const bool in_header = parser_.state() == harmony::StreamState::kHeader;
  try {
    parser_.process_eos();
  } catch (const std::exception& e) {
    spdlog::warn("harmony output: end of stream: {}", e.what());
  }
  // The output stopped (max_tokens, abort) inside a message header: the parser reads the header words as
  // text (openai-harmony's rule for "I must refuse<|end|>"), which here would be "to=functions.f
  // <|constrain|>json" shown as the answer. A header is never content: the message is dropped, as the
  // reference servers do (they show only messages whose content began). A call whose <|message|> came is
  // already an item and is reported with the arguments so far.
  if (in_header) messages_seen_ = parser_.messages().size();
  if (!prefix_events_.empty()) {
    for (auto& e : prefix_events_) events->push_back(std::move(e));
    prefix_events_.clear();
  }
  after_token(events, nullptr);
  if (open_) {
    // Still open after the end of stream (cannot happen with a lenient parser): close what was shown.
    items_[*open_].done = true;
    events->push_back({OutputEvent::Type::kEnd, *open_, {}, nullptr});
    open_.reset();
  }
}

}  // namespace orchid::server
