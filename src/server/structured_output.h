// Structured outputs in requests: the formats a request asks for and the token constraint that enforces
// them. Read here: Chat Completions `response_format` ({"type": "json_schema", "json_schema": {name,
// description, schema, strict}} or {"type": "json_object"}), Responses `text.format` ({type:
// "json_schema", name, schema, ...} or {type: "json_object"}), function tools with "strict": true, and
// vLLM's extra fields, in both of their spellings: guided_json | guided_regex | guided_grammar |
// guided_choice, and structured_outputs: {json, regex, grammar, choice}. Invalid schemas and grammars are
// 400s naming the field.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/token_constraint.h"
#include "server/json_body.h"
#include "server/server_context.h"
#include "server/tool_schema.h"
#include "structured/output_format.h"
#include "structured/turn_constraint.h"

namespace orchid::server {

struct RequestedFormat {
  structured::OutputFormat format;
  std::string param;  // the field it came from, for errors
};

// Chat `response_format` / Responses `text.format`: none for {"type": "text"}.
std::optional<RequestedFormat> read_response_format(JsonFields& f, const std::string& key);
std::optional<RequestedFormat> read_text_format(const Json& text, const std::string& param);
// The vLLM extras (marks them read); none when the request has none. Two at once are a 400.
std::optional<RequestedFormat> read_vllm_format(JsonFields& f);

// Makes constraints for a request's choices: one layout (grammars compiled once), a constraint per choice.
class StructuredOutput {
 public:
  // Harmony turn: the final channel under `format` (free without one), tool calls as the tools allow
  // (strict ones under their schema, others any JSON object), no final answer when `tool_required`, and
  // `forced_prefix` (what the prompt already holds of the turn, tool_choice) taken as already emitted.
  // Null when nothing is constrained (no format, no strict tool).
  static std::unique_ptr<StructuredOutput> for_harmony(ServerContext& ctx,
                                                       const std::optional<RequestedFormat>& format,
                                                       const std::vector<FunctionTool>& tools,
                                                       bool tool_required, const std::string& named_tool,
                                                       std::optional<int64_t> reasoning_budget);
  // Raw completion: the whole output under `format`, then the model's end token.
  static std::unique_ptr<StructuredOutput> for_completion(ServerContext& ctx, const RequestedFormat& format);

  std::unique_ptr<engine::TokenConstraint> make() const;

 private:
  std::shared_ptr<structured::GrammarVocabulary> vocab_;
  std::shared_ptr<const structured::TurnLayout> layout_;
};

}  // namespace orchid::server
