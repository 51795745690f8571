// Parsing a message header (the text between <|start|> and <|message|>), as openai-harmony 0.0.8 does:
//   "assistant to=functions.f<|channel|>commentary <|constrain|>json"   (role-first order, as rendered)
//   "assistant<|channel|>commentary to=functions.f <|constrain|>json"   (channel-first, as gpt-oss samples)
//   "browser.search to=assistant<|channel|>analysis"                     (a tool author)
// The channel is cut out first; the remaining words are, from the end: [recipient] [content type].
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "harmony/message.h"

namespace orchid::harmony {

struct ParsedHeader {
  Author author;
  std::optional<std::string> recipient;
  std::optional<std::string> channel;
  std::optional<std::string> content_type;

  bool operator==(const ParsedHeader&) const = default;
};

struct HeaderParse {
  ParsedHeader header;
  std::optional<std::string> leftover;  // words that are no header field, joined by single spaces
  std::vector<std::string> repairs;     // lenient mode: what had to be repaired, for logs
};

struct HeaderParseOptions {
  std::optional<Role> role;               // known in advance (the prompt ended with "<|start|>assistant")
  bool parse_recipient_and_type = true;   // false: every word after role and channel is leftover text
  bool lenient = false;                   // repair instead of throwing
  Role fallback_role = Role::kAssistant;  // lenient: the role when the header names none
};

// `text` must be valid UTF-8. Strict mode throws orchid::Error where openai-harmony raises: a channel
// marker without a value, no role, or an unknown role word standing alone. Leftover words are returned, not
// rejected; the caller decides.
HeaderParse parse_header(std::string_view text, const HeaderParseOptions& options);

}  // namespace orchid::harmony
