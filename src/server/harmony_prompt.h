// Conversation -> prompt ids for the chat APIs: the Harmony rendering for an assistant turn, today's date
// and the server's default reasoning effort in the system message, and the tool_choice modes that force a
// call: "required" starts the turn with "<|channel|>commentary to=functions" and a named function with its
// whole call header, so the model can only continue with a call (reasoning is then skipped; there is no
// constrained decoding to do better).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "harmony/message.h"
#include "harmony/openai_mapping.h"
#include "server/server_context.h"
#include "server/tool_schema.h"
#include "tokenizer/tokenizer.h"

namespace orchid::server {

struct HarmonyPrompt {
  std::vector<int32_t> ids;            // what the engine gets
  std::vector<int32_t> forced_prefix;  // the tail of `ids` after "<|start|>assistant" (tool_choice)
};

HarmonyPrompt render_prompt(const harmony::Conversation& conversation, ToolChoice choice,
                            const std::string& function, const tokenizer::Tokenizer& tok);

// The assistant's action stops: <|return|> and <|call|> (not <|end|>: a turn holds several messages).
std::vector<int32_t> harmony_stop_ids(const tokenizer::Tokenizer& tok);

// Today's date (local time) and the server's default effort.
harmony::MappingOptions mapping_options(const ServerContext& ctx);

// The request JSON with `tools` removed when tool_choice is "none" (the model is not told about them).
Json without_tools(const Json& request);

}  // namespace orchid::server
