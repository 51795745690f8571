// OpenAI request shapes -> a Harmony conversation ready for render_for_completion(..., Role::kAssistant).
//
// Chat Completions: {"messages": [...], "tools": [...], "reasoning_effort": ...}
// Responses:        {"input": "..." | [items], "instructions": ..., "tools": [...], "reasoning": {"effort"}}
// The rules (docs/design.md, "Harmony: OpenAI requests") follow the gpt-oss reference server and the
// Harmony cookbook: one system message (identity, date, effort, built-in tools), one developer message
// (the caller's system/developer text and function tools), then the turns; tool calls become commentary
// messages to functions.NAME, tool results come from functions.NAME; reasoning is replayed only for the
// tool loop in progress. Malformed requests throw orchid::Error naming the offending field.
#pragma once

#include <optional>
#include <string>

#include "harmony/message.h"

namespace orchid::harmony {

struct MappingOptions {
  // "Current date: ..." in the system message (YYYY-MM-DD); the caller supplies today's date.
  std::optional<std::string> date;
  // Used when the request names no effort.
  ReasoningEffort default_effort = ReasoningEffort::kMedium;
};

Conversation conversation_from_chat_request(const Json& request, const MappingOptions& options = {});
Conversation conversation_from_responses_request(const Json& request, const MappingOptions& options = {});

// The content type re-rendered function calls carry (what gpt-oss itself samples).
inline constexpr std::string_view kFunctionCallContentType = "<|constrain|>json";

}  // namespace orchid::harmony
