#include "server/chat_api.h"

#include "engine/request.h"
#include "harmony/openai_mapping.h"
#include "server/api_error.h"
#include "server/engine_response.h"
#include "server/harmony_output.h"
#include "server/harmony_prompt.h"
#include "server/json_body.h"
#include "server/sampling_request.h"
#include "server/stop_strings.h"
#include "server/structured_output.h"
#include "server/tool_schema.h"

namespace orchid::server {

namespace {

Json logprob_entry(const tokenizer::Tokenizer& tok, const runtime::SampledToken& st) {
  auto token_json = [&](int32_t id, float lp) {
    std::string piece;
    tok.decode_append(id, &piece);
    Json bytes = Json::array();
    for (unsigned char c : piece) bytes.push_back(int(c));
    return Json{{"token", piece}, {"logprob", lp}, {"bytes", bytes}};
  };
  Json e = token_json(st.token, st.logprob);
  Json top = Json::array();
  for (const auto& [id, lp] : st.top) top.push_back(token_json(id, lp));
  e["top_logprobs"] = top;
  return e;
}

class ChatResponse : public EngineResponse {
 public:
  struct Config {
    GenerationParams params;
    std::string model;
    bool include_reasoning = true;
    int64_t prompt_tokens = 0;
    std::vector<int32_t> forced_prefix;
  };

  ChatResponse(ServerContext& ctx, Config config, Admission admission)
      : EngineResponse(ctx, config.params.stream, std::move(admission)),
        cfg_(std::move(config)),
        id_(ctx.new_id("chatcmpl-")),
        created_(unix_time()) {}

  void add(engine::RequestSpec spec) {
    states_.push_back(std::make_unique<State>(ctx().tokenizer_ptr(), cfg_.forced_prefix, cfg_.params.stop));
    add_choice(std::move(spec));
  }

 protected:
  void on_event(size_t i, engine::RequestEvent& ev, std::string* body) override {
    State& c = *states_[i];
    if (streamed() && !c.role_sent) {
      c.role_sent = true;  // sent with the first token, so the first chunk marks the time to first token
      // Whether the answer will be text or tool calls is not known yet: null, as OpenAI sends before tool
      // calls, is right for both, while "" would make clients (the Agents SDK) open an empty text message.
      emit(i, Json{{"role", "assistant"}, {"content", nullptr}}, nullptr, nullptr, body);
    }
    std::vector<OutputEvent> events;
    if (!c.stopped) {
      for (size_t k = 0; k < ev.token_ids.size(); ++k) {
        const runtime::SampledToken* lp = k < ev.logprobs.size() ? &ev.logprobs[k] : nullptr;
        c.output.push(ev.token_ids[k], lp, &events);
      }
    }
    if (ev.finished()) {
      c.finish = ev.finish;
      c.error = ev.error;
      c.usage = ev.usage;
      if (!c.stopped) c.output.finish(&events);
    }
    const bool was_stopped = c.stopped;
    for (const OutputEvent& e : events) translate(i, c, e, body);
    if (!was_stopped && c.stopped && !ev.finished()) stop_choice(i);
    if (ev.finished()) finish_choice(i, c, body);
  }

  void on_complete(std::string* body, HttpResponse* response) override {
    int64_t completion = 0, reasoning = 0;
    for (const auto& c : states_) {
      completion += c->usage.completion_tokens;
      reasoning += c->output.reasoning_tokens();
    }
    Json usage = {
        {"prompt_tokens", cfg_.prompt_tokens},
        {"completion_tokens", completion},
        {"total_tokens", cfg_.prompt_tokens + completion},
        {"prompt_tokens_details", {{"cached_tokens", states_.empty() ? 0 : states_[0]->usage.cached_tokens}}},
        {"completion_tokens_details", {{"reasoning_tokens", reasoning}}}};
    if (streamed()) {
      if (cfg_.params.include_usage) {
        Json u = chunk_head();
        u["choices"] = Json::array();
        u["usage"] = usage;
        *body += sse_data(json_text(u));
      }
      *body += "data: [DONE]\n\n";
      return;
    }
    Json choices = Json::array();
    for (size_t i = 0; i < states_.size(); ++i) {
      State& c = *states_[i];
      if (c.failed()) {
        *response = error_response(500, "generation failed: " + (c.error.empty() ? "aborted" : c.error));
        return;
      }
      Json message = {{"role", "assistant"}, {"content", nullptr}, {"refusal", nullptr}};
      if (!c.content.empty() || c.calls.empty()) message["content"] = c.content;
      if (cfg_.include_reasoning && !c.reasoning.empty()) {
        message["reasoning"] = c.reasoning;
        message["reasoning_content"] = c.reasoning;
      }
      if (!c.calls.empty()) {
        Json calls = Json::array();
        for (const auto& call : c.calls)
          calls.push_back({{"id", call.id},
                           {"type", "function"},
                           {"function",
                            {{"name", c.output.items()[call.item].name},
                             {"arguments", c.output.items()[call.item].text}}}});
        message["tool_calls"] = calls;
      }
      Json choice = {
          {"index", i}, {"message", message}, {"logprobs", nullptr}, {"finish_reason", c.finish_reason()}};
      if (cfg_.params.sampling.num_logprobs >= 0) choice["logprobs"] = {{"content", c.logprobs}};
      choices.push_back(std::move(choice));
    }
    Json r = chunk_head();
    r["object"] = "chat.completion";
    r["choices"] = choices;
    r["usage"] = usage;
    response->body = json_text(r);
  }

 private:
  struct Call {
    size_t item;
    std::string id;
  };
  struct State {
    State(std::shared_ptr<const tokenizer::Tokenizer> tok, const std::vector<int32_t>& prefix,
          const std::vector<std::string>& stops)
        : output(std::move(tok), prefix), stop(stops) {}
    HarmonyOutput output;
    StopStringMatcher stop;
    bool role_sent = false;
    bool stopped = false;  // a stop string matched: later tokens are ignored
    std::vector<Call> calls;
    std::string content, reasoning;
    Json logprobs = Json::array();
    engine::FinishReason finish = engine::FinishReason::kNone;
    std::string error;
    engine::Usage usage;

    bool failed() const {
      return !stopped && (finish == engine::FinishReason::kError || finish == engine::FinishReason::kAbort);
    }
    std::string finish_reason() const {
      if (stopped) return "stop";
      if (finish == engine::FinishReason::kLength) return "length";
      return output.has_function_calls() ? "tool_calls" : "stop";
    }
  };

  Json chunk_head() const {
    return {{"id", id_},
            {"object", "chat.completion.chunk"},
            {"created", created_},
            {"model", cfg_.model},
            {"system_fingerprint", nullptr}};
  }

  void emit(size_t i, Json delta, const Json* logprobs, const char* finish, std::string* body) {
    Json choice = {
        {"index", i}, {"delta", std::move(delta)}, {"logprobs", nullptr}, {"finish_reason", nullptr}};
    if (logprobs) choice["logprobs"] = {{"content", *logprobs}};
    if (finish) choice["finish_reason"] = finish;
    Json c = chunk_head();
    c["choices"] = Json::array({std::move(choice)});
    *body += sse_data(json_text(c));
  }

  void content_text(size_t i, State& c, const std::string& text, const Json* logprobs, std::string* body) {
    if (streamed()) {
      if (!text.empty() || (logprobs && !logprobs->empty()))
        emit(i, Json{{"content", text}}, logprobs, nullptr, body);
    } else {
      c.content += text;
    }
  }

  void translate(size_t i, State& c, const OutputEvent& e, std::string* body) {
    if (c.stopped) return;
    const OutputItem& item = c.output.items()[e.item];
    switch (item.kind) {
      case ItemKind::kReasoning:
        if (e.type != OutputEvent::Type::kDelta || e.delta.empty() || !cfg_.include_reasoning) return;
        if (streamed()) {
          emit(i, Json{{"reasoning", e.delta}, {"reasoning_content", e.delta}}, nullptr, nullptr, body);
        } else {
          c.reasoning += e.delta;
        }
        return;
      case ItemKind::kFunctionCall:
        if (e.type == OutputEvent::Type::kBegin) {
          c.calls.push_back({e.item, ctx().new_id("call_")});
          if (streamed())
            emit(
                i,
                Json{{"tool_calls", Json::array({{{"index", c.calls.size() - 1},
                                                  {"id", c.calls.back().id},
                                                  {"type", "function"},
                                                  {"function", {{"name", item.name}, {"arguments", ""}}}}})}},
                nullptr, nullptr, body);
        } else if (e.type == OutputEvent::Type::kDelta && !e.delta.empty() && streamed()) {
          emit(i,
               Json{{"tool_calls",
                     Json::array({{{"index", c.calls.size() - 1}, {"function", {{"arguments", e.delta}}}}})}},
               nullptr, nullptr, body);
        }
        return;
      case ItemKind::kMessage: {
        if (e.type != OutputEvent::Type::kDelta) return;
        const std::string text = c.stop.push(e.delta);
        Json lp = Json::array();
        if (e.logprob && cfg_.params.sampling.num_logprobs >= 0 && !c.stop.matched()) {
          lp.push_back(logprob_entry(ctx().tokenizer(), *e.logprob));
          if (!streamed()) c.logprobs.push_back(lp.back());
        }
        content_text(i, c, text, cfg_.params.sampling.num_logprobs >= 0 ? &lp : nullptr, body);
        if (c.stop.matched()) c.stopped = true;
        return;
      }
    }
  }

  void finish_choice(size_t i, State& c, std::string* body) {
    if (!c.stopped) content_text(i, c, c.stop.flush(), nullptr, body);
    if (!streamed()) return;
    if (c.failed()) {
      *body += sse_data(error_body(500, "generation failed: " + (c.error.empty() ? "aborted" : c.error)));
      return;
    }
    const std::string reason = c.finish_reason();
    emit(i, Json::object(), nullptr, reason.c_str(), body);
  }

  Config cfg_;
  std::string id_;
  int64_t created_;
  std::vector<std::unique_ptr<State>> states_;
};

}  // namespace

HttpResponse handle_chat_completions(ServerContext& ctx, const HttpRequest& request) {
  const Json body = parse_json_body(request.body);
  JsonFields f(body, "");
  const auto model = f.string("model");
  ctx.check_model(model ? &*model : nullptr);
  GenerationParams params = read_generation_params(f, ApiKind::kChat);

  const Json* messages = f.get("messages");
  if (!messages) bad_request("messages", "messages: missing");
  if (!messages->is_array() || messages->empty())
    bad_request("messages", "messages: expected a non-empty array of messages");
  std::vector<FunctionTool> tools;
  if (const Json* t = f.get("tools")) tools = check_chat_tools(*t);
  std::string forced;
  const ToolChoice choice = check_tool_choice(f.get("tool_choice"), tools, /*chat_shape=*/true, &forced);
  f.boolean("parallel_tool_calls");
  f.get("reasoning_effort");  // checked by the Harmony mapping
  bool include_reasoning = f.boolean("include_reasoning").value_or(true);
  std::optional<int64_t> reasoning_budget;  // structured outputs only
  if (const Json* r = f.get("reasoning")) {
    JsonFields rf(*r, "reasoning");
    rf.get("effort");  // checked by the Harmony mapping
    if (rf.boolean("exclude").value_or(false)) include_reasoning = false;
    reasoning_budget = rf.integer("max_tokens", 0, 1 << 30);
    rf.ignore({"enabled", "summary"});
    rf.reject_unknown();
  }
  std::optional<RequestedFormat> format = read_response_format(f, "response_format");
  if (std::optional<RequestedFormat> extra = read_vllm_format(f)) {
    if (format) bad_request(extra->param, "{}: response_format is given too", extra->param);
    format = std::move(extra);
  }
  if (const Json* bias = f.get("logit_bias"); bias && !(bias->is_object() && bias->empty()))
    bad_request("logit_bias", "logit_bias: not supported");
  f.ignore({"user", "metadata", "store", "service_tier", "prompt_cache_key", "safety_identifier",
            "modalities", "verbosity"});
  f.reject_unknown();

  const harmony::Conversation conv = harmony::conversation_from_chat_request(
      choice == ToolChoice::kNone ? without_tools(body) : body, mapping_options(ctx));
  const HarmonyPrompt prompt = render_prompt(conv, choice, forced, ctx.tokenizer());
  engine::ServingEngine& engine = ctx.engine();
  const int32_t max_tokens =
      resolve_max_tokens(int64_t(prompt.ids.size()), params.max_tokens, engine.max_model_len(), "messages");

  ChatResponse::Config cfg;
  cfg.params = params;
  cfg.model = model.value_or(ctx.options().served_model_name);
  cfg.include_reasoning = include_reasoning;
  cfg.prompt_tokens = int64_t(prompt.ids.size());
  cfg.forced_prefix = prompt.forced_prefix;
  const auto structured = StructuredOutput::for_harmony(
      ctx, format, choice == ToolChoice::kNone ? std::vector<FunctionTool>{} : tools,
      choice == ToolChoice::kRequired, choice == ToolChoice::kNamed ? forced : "", reasoning_budget);
  auto response = std::make_shared<ChatResponse>(ctx, std::move(cfg), ctx.admit(params.n));
  for (int32_t j = 0; j < params.n; ++j) {
    engine::RequestSpec spec = make_request_spec(params, j, max_tokens);
    spec.prompt = prompt.ids;
    if (structured) spec.constraint = structured->make();
    if (!params.ignore_eos) spec.stop_token_ids = harmony_stop_ids(ctx.tokenizer());
    response->add(std::move(spec));
  }
  HttpResponse r;
  if (params.stream) {
    r.content_type = "text/event-stream";
    r.headers = {{"Cache-Control", "no-cache"}};
  }
  r.stream = response;
  return r;
}

}  // namespace orchid::server
