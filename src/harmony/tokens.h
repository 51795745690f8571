// The o200k_harmony special tokens that give Harmony its structure, and the stop sets.
// Ids are fixed by the gpt-oss vocabulary; tests check them against the tokenizer.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

namespace orchid::harmony {

inline constexpr int32_t kReturnId = 200002;     // <|return|>: end of the final answer (decode time only)
inline constexpr int32_t kConstrainId = 200003;  // <|constrain|>: starts a data type ("<|constrain|>json")
inline constexpr int32_t kChannelId = 200005;    // <|channel|>
inline constexpr int32_t kStartId = 200006;      // <|start|>: a message begins, its header follows
inline constexpr int32_t kEndId = 200007;        // <|end|>: end of a message
inline constexpr int32_t kMessageId = 200008;    // <|message|>: header -> content
inline constexpr int32_t kCallId = 200012;       // <|call|>: end of a tool call

inline constexpr std::string_view kConstrainLiteral = "<|constrain|>";
inline constexpr std::string_view kChannelLiteral = "<|channel|>";

// Where sampling stops for an assistant turn. Not <|end|>: one turn usually holds several messages.
inline constexpr std::array<int32_t, 2> kAssistantStopIds = {kReturnId, kCallId};
// Tokens that end a message for the parser.
inline constexpr std::array<int32_t, 3> kParserStopIds = {kReturnId, kCallId, kEndId};

inline constexpr bool is_parser_stop(int32_t id) {
  return id == kReturnId || id == kCallId || id == kEndId;
}

// "<|start|>" etc. for the seven structural ids above, nullopt for any other id.
constexpr std::optional<std::string_view> structural_literal(int32_t id) {
  switch (id) {
    case kReturnId:
      return "<|return|>";
    case kConstrainId:
      return "<|constrain|>";
    case kChannelId:
      return "<|channel|>";
    case kStartId:
      return "<|start|>";
    case kEndId:
      return "<|end|>";
    case kMessageId:
      return "<|message|>";
    case kCallId:
      return "<|call|>";
    default:
      return std::nullopt;
  }
}

}  // namespace orchid::harmony
