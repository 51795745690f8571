#include "harmony/message.h"

#include <algorithm>
#include <cctype>

namespace orchid::harmony {

std::string_view role_name(Role role) {
  switch (role) {
    case Role::kSystem:
      return "system";
    case Role::kDeveloper:
      return "developer";
    case Role::kUser:
      return "user";
    case Role::kAssistant:
      return "assistant";
    case Role::kTool:
      return "tool";
  }
  return "user";
}

std::optional<Role> role_from_name(std::string_view name) {
  for (Role r : {Role::kSystem, Role::kDeveloper, Role::kUser, Role::kAssistant, Role::kTool}) {
    if (role_name(r) == name) return r;
  }
  return std::nullopt;
}

std::string_view effort_name(ReasoningEffort effort) {
  switch (effort) {
    case ReasoningEffort::kLow:
      return "low";
    case ReasoningEffort::kMedium:
      return "medium";
    case ReasoningEffort::kHigh:
      return "high";
  }
  return "medium";
}

std::optional<ReasoningEffort> effort_from_name(std::string_view name) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (ReasoningEffort e : {ReasoningEffort::kLow, ReasoningEffort::kMedium, ReasoningEffort::kHigh}) {
    if (effort_name(e) == lower) return e;
  }
  return std::nullopt;
}

SystemContent SystemContent::empty() {
  SystemContent s;
  s.model_identity.reset();
  s.reasoning_effort.reset();
  s.knowledge_cutoff.reset();
  s.channel_config.reset();
  return s;
}

Message Message::text(Role role, std::string text) {
  return Message::text(Author{role, std::nullopt}, std::move(text));
}

Message Message::text(Author author, std::string text) {
  Message m;
  m.author = std::move(author);
  m.content.emplace_back(TextContent{std::move(text)});
  return m;
}

Message& Message::with_channel(std::string c) {
  channel = std::move(c);
  return *this;
}

Message& Message::with_recipient(std::string r) {
  recipient = std::move(r);
  return *this;
}

Message& Message::with_content_type(std::string t) {
  content_type = std::move(t);
  return *this;
}

std::string Message::text_content() const {
  std::string out;
  for (const Content& c : content) {
    if (const auto* t = std::get_if<TextContent>(&c)) out += t->text;
  }
  return out;
}

}  // namespace orchid::harmony
