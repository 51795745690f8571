// Function tool definitions, checked before they reach the Harmony renderer: OpenAI's name rule
// (^[a-zA-Z0-9_-]{1,64}$, unique), and a parameters schema whose keywords have the JSON types JSON Schema
// gives them. The renderer turns any JSON into TypeScript; this is so a client learns of a mistake (a
// misspelt "properties" value, a numeric "type") instead of the model seeing a garbled declaration.
#pragma once

#include <string>
#include <vector>

#include "server/json_body.h"

namespace orchid::server {

struct FunctionTool {
  std::string name;
  const Json* parameters = nullptr;  // in the request body; null when absent
  bool strict = false;               // the arguments must follow `parameters` (structured outputs)
};

void check_function_name(const std::string& name, const std::string& param);
void check_parameters_schema(const Json& schema, const std::string& param);

// Chat Completions tools: [{"type": "function", "function": {"name", "description", "parameters",
// "strict"}}].
std::vector<FunctionTool> check_chat_tools(const Json& tools);
// Responses tools: [{"type": "function", "name", "description", "parameters", "strict"}].
std::vector<FunctionTool> check_responses_tools(const Json& tools);

// tool_choice of either API: "auto" | "none" | "required" | {"type": "function", ...name...}. Returns the
// mode, and the function's name for a named choice (which must be one of `tools`).
enum class ToolChoice { kAuto, kNone, kRequired, kNamed };
ToolChoice check_tool_choice(const Json* choice, const std::vector<FunctionTool>& tools, bool chat_shape,
                             std::string* name);

}  // namespace orchid::server
