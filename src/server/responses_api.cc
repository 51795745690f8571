#include "server/responses_api.h"

#include <limits>

#include "harmony/openai_mapping.h"
#include "server/api_error.h"
#include "server/engine_response.h"
#include "server/harmony_prompt.h"
#include "server/json_body.h"
#include "server/responses_output.h"
#include "server/sampling_request.h"
#include "server/structured_output.h"
#include "server/tool_schema.h"

namespace orchid::server {

namespace {

// OpenAI's limits: up to 16 pairs, keys up to 64 characters, string values up to 512.
Json checked_metadata(const Json* metadata) {
  if (!metadata) return Json::object();
  if (!metadata->is_object() || metadata->size() > 16)
    bad_request("metadata", "metadata: expected an object of at most 16 string values");
  for (auto it = metadata->begin(); it != metadata->end(); ++it) {
    if (it.key().size() > 64)
      bad_request("metadata", "metadata: key '{}' is longer than 64 characters", it.key().substr(0, 64));
    if (!it.value().is_string() || it.value().get_ref<const std::string&>().size() > 512)
      bad_request("metadata", "metadata.{}: expected a string of at most 512 characters", it.key());
  }
  return *metadata;
}

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
        output_(ctx.tokenizer_ptr(), cfg_.forced_prefix,
                [c = &ctx](std::string_view prefix) { return c->new_id(prefix); }) {}

 protected:
  void on_start(std::string* body) override {
    if (!streamed()) return;
    output_.event("response.created", {{"response", response_json("in_progress")}}, body);
    output_.event("response.in_progress", {{"response", response_json("in_progress")}}, body);
  }

  void on_event(size_t, engine::RequestEvent& ev, std::string* body) override {
    std::string* sse = streamed() ? body : nullptr;
    output_.push(ev.token_ids, sse);
    if (ev.finished()) {
      finish_ = ev.finish;
      error_ = ev.error;
      usage_ = ev.usage;
      output_.finish(finish_ == engine::FinishReason::kLength, sse);
    }
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
    output_.event("response." + (status == "completed" ? std::string("completed") : status),
                  {{"response", response_json(status)}}, body);
  }

 private:
  Json response_json(const std::string& status) const {
    Json r = {{"id", id_},
              {"object", "response"},
              {"created_at", created_},
              {"status", status},
              {"background", false},
              {"error", nullptr},
              {"incomplete_details", nullptr},
              {"max_output_tokens", cfg_.params.max_tokens ? Json(*cfg_.params.max_tokens) : Json(nullptr)},
              {"model", cfg_.model},
              {"output", status == "in_progress" ? Json::array() : output_.output_json()},
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

  Config cfg_;
  std::string id_;
  int64_t created_;
  ResponsesOutput output_;
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
  // The response object repeats what the request said; these are the fields it would otherwise default.
  Json echo = {{"parallel_tool_calls", f.boolean("parallel_tool_calls").value_or(true)}};
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
  if (auto t = f.string("truncation")) {
    if (*t != "disabled" && *t != "auto")
      bad_request("truncation", "truncation: expected \"disabled\" or \"auto\"");
    echo["truncation"] = *t;
  }
  if (auto n = f.integer("top_logprobs", 0, 20)) {
    if (*n > 0)
      bad_request("top_logprobs",
                  "top_logprobs: not supported by the Responses API here; use chat completions");
    echo["top_logprobs"] = *n;
  }
  if (const Json* so = f.get("stream_options")) {
    JsonFields of(*so, "stream_options");
    of.ignore({"include_obfuscation"});
    of.reject_unknown();
  }
  echo["metadata"] = checked_metadata(f.get("metadata"));
  for (const char* key : {"user", "prompt_cache_key", "safety_identifier"})
    if (auto v = f.string(key)) echo[key] = *v;
  // As sent (the sampler keeps them as float).
  for (const char* key : {"temperature", "top_p"})
    if (body.contains(key) && body[key].is_number()) echo[key] = body[key];
  if (auto n = f.integer("max_tool_calls", 0, std::numeric_limits<int32_t>::max()))
    echo["max_tool_calls"] = *n;
  // No response is kept (previous_response_id is refused above): store=true, the API's default, is accepted
  // and the response says "store": false, so a client knows it cannot fetch or continue it by id. vLLM
  // without its response store does the same.
  f.boolean("store");
  f.ignore({"service_tier", "include"});
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
  cfg.echo.update(echo);
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
