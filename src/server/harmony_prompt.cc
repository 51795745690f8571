#include "server/harmony_prompt.h"

#include <ctime>

#include "core/error.h"
#include "harmony/render.h"

namespace orchid::server {

HarmonyPrompt render_prompt(const harmony::Conversation& conversation, ToolChoice choice,
                            const std::string& function, const tokenizer::Tokenizer& tok) {
  HarmonyPrompt p;
  p.ids = harmony::render_completion_ids(conversation, tok, harmony::Role::kAssistant);
  std::string prefix;
  if (choice == ToolChoice::kRequired) {
    // Ends before the '.' so the model's own tokenization of ".name" is not split.
    prefix = "<|channel|>commentary to=functions";
  } else if (choice == ToolChoice::kNamed) {
    prefix = "<|channel|>commentary to=functions." + function + " <|constrain|>json<|message|>";
  }
  if (!prefix.empty()) {
    p.forced_prefix = tok.encode(prefix, {"<|channel|>", "<|constrain|>", "<|message|>"});
    p.ids.insert(p.ids.end(), p.forced_prefix.begin(), p.forced_prefix.end());
  }
  return p;
}

std::vector<int32_t> harmony_stop_ids(const tokenizer::Tokenizer& tok) {
  std::vector<int32_t> ids;
  for (const char* s : {"<|return|>", "<|call|>"}) {
    auto id = tok.special_id(s);
    ORCHID_CHECK(id.has_value(), "the tokenizer has no {}", s);
    ids.push_back(*id);
  }
  return ids;
}

harmony::MappingOptions mapping_options(const ServerContext& ctx) {
  harmony::MappingOptions o;
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char buf[16];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", &local);
  o.date = std::string(buf);
  o.default_effort = harmony::effort_from_name(ctx.options().default_reasoning_effort)
                         .value_or(harmony::ReasoningEffort::kMedium);
  return o;
}

Json without_tools(const Json& request) {
  Json copy = request;
  copy.erase("tools");
  return copy;
}

}  // namespace orchid::server
