#include "server/responses_api.h"

#include "harmony/openai_mapping.h"
#include "server/api_error.h"
#include "server/engine_response.h"
#include "server/harmony_output.h"
#include "server/harmony_prompt.h"
#include "server/json_body.h"
#include "server/sampling_request.h"
#include "server/structured_output.h"
#include "server/tool_schema.h"

namespace orchid::server {

namespace {

class ResponsesResponse : public EngineResponse {
 public:
  struct Config {
    GenerationParams params;
    std::string model;
    int64_t prompt_tokens = 0;
    std::vector<int32_t> forced_prefix;
    Json echo;  // request fields the response object repeats (instructions, tools, tool_choice, ...)
  };

  ResponsesResponse(ServerContext& ctx, Config config, Admission admission)
      : EngineResponse(ctx, config.params.stream, std::move(admission)),
        cfg_(std::move(config)),
        id_(ctx.new_id("resp_")),
        created_(unix_time()),
        output_(ctx.tokenizer_ptr(), cfg_.forced_prefix) {}

 protected:
  void on_start(std::string* body) override {
    if (!streamed()) return;
    event("response.created", {{"response", response_json("in_progress")}}, body);
    event("response.in_progress", {{"response", response_json("in_progress")}}, body);
  }

  void on_event(size_t, engine::RequestEvent& ev, std::string* body) override {
    std::vector<OutputEvent> events;
    for (int32_t t : ev.token_ids) output_.push(t, nullptr, &events);
    if (ev.finished()) {
      finish_ = ev.finish;
      error_ = ev.error;
      usage_ = ev.usage;
      output_.finish(&events);
    }
    for (const OutputEvent& e : events) translate(e, body);
  }

  void on_complete(std::string* body, HttpResponse* response) override {
    const bool failed = finish_ == engine::FinishReason::kError || finish_ == engine::FinishReason::kAbort;
    const std::string status = failed                                     ? "failed"
                               : finish_ == engine::FinishReason::kLength ? "incomplete"
                                                                          : "completed";
    if (!streamed()) {
      if (failed) {
        *response = error_response(500, "generation failed: " + (error_.empty() ? "aborted" : error_));
        return;
      }
      response->body = json_text(response_json(status));
      return;
    }
    event("response." + (status == "completed" ? std::string("completed") : status),
          {{"response", response_json(status)}}, body);
  }

 private:
  struct ItemIds {
    std::string id, call_id;
  };

  void event(const std::string& type, Json fields, std::string* body) {
    Json e = {{"type", type}, {"sequence_number", seq_++}};
    for (auto it = fields.begin(); it != fields.end(); ++it) e[it.key()] = it.value();
    *body += sse_event(type, json_text(e));
  }

  Json item_json(size_t index) const {
    const OutputItem& item = output_.items()[index];
    const ItemIds& ids = ids_[index];
    const std::string status = item.done ? "completed" : "in_progress";
    switch (item.kind) {
      case ItemKind::kReasoning: {
        Json content = Json::array();
        if (item.done) content.push_back({{"type", "reasoning_text"}, {"text", item.text}});
        return {{"id", ids.id},
                {"type", "reasoning"},
                {"summary", Json::array()},
                {"content", content},
                {"status", status}};
      }
      case ItemKind::kFunctionCall:
        return {{"id", ids.id},
                {"type", "function_call"},
                {"call_id", ids.call_id},
                {"name", item.name},
                {"arguments", item.done ? item.text : std::string()},
                {"status", status}};
      case ItemKind::kMessage:
      default: {
        Json content = Json::array();
        if (item.done) content.push_back(text_part(item.text));
        return {{"id", ids.id},
                {"type", "message"},
                {"role", "assistant"},
                {"status", status},
                {"content", content}};
      }
    }
  }

  static Json text_part(const std::string& text) {
    return {
        {"type", "output_text"}, {"text", text}, {"annotations", Json::array()}, {"logprobs", Json::array()}};
  }

  Json response_json(const std::string& status) const {
    Json output = Json::array();
    if (status != "in_progress")
      for (size_t i = 0; i < output_.items().size(); ++i) output.push_back(item_json(i));
    Json r = {{"id", id_},
              {"object", "response"},
              {"created_at", created_},
              {"status", status},
              {"background", false},
              {"error", nullptr},
              {"incomplete_details", nullptr},
              {"max_output_tokens", cfg_.params.max_tokens ? Json(*cfg_.params.max_tokens) : Json(nullptr)},
              {"model", cfg_.model},
              {"output", output},
              {"parallel_tool_calls", true},
              {"previous_response_id", nullptr},
              {"service_tier", "default"},
              {"store", false},
              {"temperature", cfg_.params.sampling.temperature},
              {"text", {{"format", {{"type", "text"}}}}},
              {"top_p", cfg_.params.sampling.top_p},
              {"truncation", "disabled"},
              {"usage", nullptr},
              {"metadata", Json::object()}};
    for (auto it = cfg_.echo.begin(); it != cfg_.echo.end(); ++it) r[it.key()] = it.value();
    if (status == "incomplete") r["incomplete_details"] = {{"reason", "max_output_tokens"}};
    if (status == "failed")
      r["error"] = {{"code", "server_error"}, {"message", error_.empty() ? "generation aborted" : error_}};
    if (status != "in_progress") {
      const int64_t out = usage_.completion_tokens;
      r["usage"] = {{"input_tokens", cfg_.prompt_tokens},
                    {"input_tokens_details", {{"cached_tokens", usage_.cached_tokens}}},
                    {"output_tokens", out},
                    {"output_tokens_details", {{"reasoning_tokens", output_.reasoning_tokens()}}},
                    {"total_tokens", cfg_.prompt_tokens + out}};
    }
    return r;
  }

  void translate(const OutputEvent& e, std::string* body) {
    if (e.type == OutputEvent::Type::kBegin) {
      const ItemKind kind = output_.items()[e.item].kind;
      ItemIds ids;
      ids.id = ctx().new_id(kind == ItemKind::kReasoning      ? "rs_"
                            : kind == ItemKind::kFunctionCall ? "fc_"
                                                              : "msg_");
      if (kind == ItemKind::kFunctionCall) ids.call_id = ctx().new_id("call_");
      ids_.push_back(std::move(ids));
    }
    if (!streamed()) return;
    const OutputItem& item = output_.items()[e.item];
    const Json where = {{"item_id", ids_[e.item].id}, {"output_index", e.item}};
    auto with = [&](Json extra) {
      Json j = where;
      for (auto it = extra.begin(); it != extra.end(); ++it) j[it.key()] = it.value();
      return j;
    };
    switch (e.type) {
      case OutputEvent::Type::kBegin:
        event("response.output_item.added", {{"output_index", e.item}, {"item", item_json(e.item)}}, body);
        if (item.kind == ItemKind::kMessage)
          event("response.content_part.added", with({{"content_index", 0}, {"part", text_part("")}}), body);
        if (item.kind == ItemKind::kReasoning)
          event("response.content_part.added",
                with({{"content_index", 0}, {"part", {{"type", "reasoning_text"}, {"text", ""}}}}), body);
        return;
      case OutputEvent::Type::kDelta:
        if (e.delta.empty()) return;
        if (item.kind == ItemKind::kMessage)
          event("response.output_text.delta",
                with({{"content_index", 0}, {"delta", e.delta}, {"logprobs", Json::array()}}), body);
        else if (item.kind == ItemKind::kReasoning)
          event("response.reasoning_text.delta", with({{"content_index", 0}, {"delta", e.delta}}), body);
        else
          event("response.function_call_arguments.delta", with({{"delta", e.delta}}), body);
        return;
      case OutputEvent::Type::kEnd:
        if (item.kind == ItemKind::kMessage) {
          event("response.output_text.done",
                with({{"content_index", 0}, {"text", item.text}, {"logprobs", Json::array()}}), body);
          event("response.content_part.done", with({{"content_index", 0}, {"part", text_part(item.text)}}),
                body);
        } else if (item.kind == ItemKind::kReasoning) {
          event("response.reasoning_text.done", with({{"content_index", 0}, {"text", item.text}}), body);
          event("response.content_part.done",
                with({{"content_index", 0}, {"part", {{"type", "reasoning_text"}, {"text", item.text}}}}),
                body);
        } else {
          event("response.function_call_arguments.done",
                with({{"arguments", item.text}, {"name", item.name}}), body);
        }
        event("response.output_item.done", {{"output_index", e.item}, {"item", item_json(e.item)}}, body);
        return;
    }
  }

  Config cfg_;
  std::string id_;
  int64_t created_;
  HarmonyOutput output_;
  std::vector<ItemIds> ids_;
  int64_t seq_ = 0;
  engine::FinishReason finish_ = engine::FinishReason::kNone;
  std::string error_;
  engine::Usage usage_;
};

}  // namespace

HttpResponse handle_responses(ServerContext& ctx, const HttpRequest& request) {
  const Json body = parse_json_body(request.body);
  JsonFields f(body, "");
  const auto model = f.string("model");
  ctx.check_model(model ? &*model : nullptr);
  GenerationParams params = read_generation_params(f, ApiKind::kResponses);
  if (!f.has("input")) bad_request("input", "input: missing");
  if (f.has("previous_response_id"))
    bad_request(
        "previous_response_id",
        "previous_response_id: this server stores no responses; send the whole conversation as input");
  if (f.boolean("background").value_or(false))
    bad_request("background", "background: background responses are not supported");
  std::vector<FunctionTool> tools;
  if (const Json* t = f.get("tools")) tools = check_responses_tools(*t);
  std::string forced;
  const ToolChoice choice = check_tool_choice(f.get("tool_choice"), tools, /*chat_shape=*/false, &forced);
  f.boolean("parallel_tool_calls");
  f.get("instructions");  // checked by the Harmony mapping
  std::string effort = ctx.options().default_reasoning_effort;
  std::optional<int64_t> reasoning_budget;  // structured outputs only
  if (const Json* r = f.get("reasoning")) {
    JsonFields rf(*r, "reasoning");
    if (auto e = rf.string("effort")) effort = *e;  // its value is checked by the Harmony mapping
    reasoning_budget = rf.integer("max_tokens", 0, 1 << 30);
    rf.ignore({"summary", "generate_summary"});
    rf.reject_unknown();
  }
  std::optional<RequestedFormat> format;
  if (const Json* t = f.get("text")) format = read_text_format(*t, "text");
  if (std::optional<RequestedFormat> extra = read_vllm_format(f)) {
    if (format) bad_request(extra->param, "{}: text.format is given too", extra->param);
    format = std::move(extra);
  }
  if (auto t = f.string("truncation"); t && *t != "disabled" && *t != "auto")
    bad_request("truncation", "truncation: expected \"disabled\" or \"auto\"");
  if (auto n = f.integer("top_logprobs", 0, 20); n && *n > 0)
    bad_request("top_logprobs",
                "top_logprobs: not supported by the Responses API here; use chat completions");
  if (const Json* so = f.get("stream_options")) {
    JsonFields of(*so, "stream_options");
    of.ignore({"include_obfuscation"});
    of.reject_unknown();
  }
  f.ignore({"user", "metadata", "store", "service_tier", "prompt_cache_key", "safety_identifier", "include",
            "max_tool_calls"});
  f.reject_unknown();

  const harmony::Conversation conv = harmony::conversation_from_responses_request(
      choice == ToolChoice::kNone ? without_tools(body) : body, mapping_options(ctx));
  const HarmonyPrompt prompt = render_prompt(conv, choice, forced, ctx.tokenizer());
  engine::ServingEngine& engine = ctx.engine();
  const int32_t max_tokens =
      resolve_max_tokens(int64_t(prompt.ids.size()), params.max_tokens, engine.max_model_len(), "input");

  ResponsesResponse::Config cfg;
  cfg.params = params;
  cfg.model = model.value_or(ctx.options().served_model_name);
  cfg.prompt_tokens = int64_t(prompt.ids.size());
  cfg.forced_prefix = prompt.forced_prefix;
  cfg.echo = {{"instructions", body.contains("instructions") ? body["instructions"] : Json(nullptr)},
              {"tools", body.contains("tools") ? body["tools"] : Json::array()},
              {"tool_choice", body.contains("tool_choice") ? body["tool_choice"] : Json("auto")},
              {"reasoning", {{"effort", effort}, {"summary", nullptr}}}};
  if (const Json* t = f.get("text"); t && t->contains("format")) cfg.echo["text"] = *t;
  const auto structured = StructuredOutput::for_harmony(
      ctx, format, choice == ToolChoice::kNone ? std::vector<FunctionTool>{} : tools,
      choice == ToolChoice::kRequired, choice == ToolChoice::kNamed ? forced : "", reasoning_budget);
  auto response = std::make_shared<ResponsesResponse>(ctx, std::move(cfg), ctx.admit(1));
  engine::RequestSpec spec = make_request_spec(params, 0, max_tokens);
  spec.prompt = prompt.ids;
  spec.stop_token_ids = harmony_stop_ids(ctx.tokenizer());
  if (structured) spec.constraint = structured->make();
  response->add_choice(std::move(spec));
  HttpResponse r;
  if (params.stream) {
    r.content_type = "text/event-stream";
    r.headers = {{"Cache-Control", "no-cache"}};
  }
  r.stream = response;
  return r;
}

}  // namespace orchid::server
