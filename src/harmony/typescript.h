// JSON Schema -> the TypeScript-like type text gpt-oss sees for tool parameters, following
// openai-harmony 0.0.8 rule for rule (oneOf, type arrays, objects with title/description/examples/default
// comments, string enums, arrays, `nullable`), including its quirks: nested object properties are indented
// by four spaces but the object's `{` is not, a property description that equals the first oneOf variant's
// is not repeated, and anything it does not understand (anyOf, $ref, const, ...) becomes `any`.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "harmony/message.h"

namespace orchid::harmony {

std::string schema_to_typescript(const Json& schema, const std::string& indent);

// The "# Tools" section of a system or developer message (namespaces in key order).
std::string render_tools_section(const ToolsMap& tools);

// Rust's str::lines(): split on '\n', strip one '\r' before each '\n', no empty line after a final '\n'.
std::vector<std::string_view> split_lines(std::string_view text);

}  // namespace orchid::harmony
