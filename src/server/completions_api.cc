#include "server/completions_api.h"

#include "server/api_error.h"
#include "server/engine_response.h"
#include "server/json_body.h"
#include "server/sampling_request.h"
#include "server/structured_output.h"
#include "tokenizer/engine_text_decoder.h"

namespace orchid::server {

namespace {

constexpr size_t kMaxPrompts = 64;
constexpr int64_t kMaxChoices = 128;

std::vector<std::vector<int32_t>> read_prompts(const Json* p, const tokenizer::Tokenizer& tok) {
  if (!p) bad_request("prompt", "prompt: missing");
  const auto specials = tok.special_literals();
  auto ids_of = [&](const Json& v, const std::string& where) {
    std::vector<int32_t> ids;
    if (v.is_string()) {
      ids = tok.encode(v.get_ref<const std::string&>(), specials);
    } else if (v.is_array()) {
      for (const auto& x : v) {
        if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() >= tok.vocab_size())
          bad_request("prompt", "{}: token ids must be integers in [0, {}), got {}", where, tok.vocab_size(),
                      x.dump());
        ids.push_back(int32_t(x.get<int64_t>()));
      }
    } else {
      bad_request("prompt", "{}: expected a string or an array of token ids, got {}", where,
                  json_type_name(v));
    }
    if (ids.empty()) bad_request("prompt", "{}: the prompt is empty", where);
    return ids;
  };
  std::vector<std::vector<int32_t>> out;
  const bool batch = p->is_array() && !p->empty() && ((*p)[0].is_string() || (*p)[0].is_array());
  if (!batch) {
    out.push_back(ids_of(*p, "prompt"));
    return out;
  }
  if (p->size() > kMaxPrompts)
    bad_request("prompt", "prompt: {} prompts; at most {} per request", p->size(), kMaxPrompts);
  for (size_t i = 0; i < p->size(); ++i) out.push_back(ids_of((*p)[i], fmt::format("prompt[{}]", i)));
  return out;
}

Json usage_json(int64_t prompt, int64_t completion, int64_t cached) {
  Json u = {
      {"prompt_tokens", prompt}, {"completion_tokens", completion}, {"total_tokens", prompt + completion}};
  if (cached > 0) u["prompt_tokens_details"] = {{"cached_tokens", cached}};
  return u;
}

class CompletionResponse : public EngineResponse {
 public:
  CompletionResponse(ServerContext& ctx, const GenerationParams& params, Admission admission,
                     std::string model, std::vector<std::string> echo_text)
      : EngineResponse(ctx, params.stream, std::move(admission)),
        params_(params),
        model_(std::move(model)),
        id_(ctx.new_id("cmpl-")),
        created_(unix_time()),
        echo_(std::move(echo_text)) {}

  void add(engine::RequestSpec spec, size_t prompt_index) {
    State st;
    st.prompt = prompt_index;
    states_.push_back(std::move(st));
    add_choice(std::move(spec));
  }

 protected:
  void on_event(size_t i, engine::RequestEvent& ev, std::string* body) override {
    State& c = states_[i];
    std::string text = std::move(ev.text);
    if (!c.echoed && params_.echo) {
      text = echo_[c.prompt] + text;
      c.echoed = true;
    }
    Json lp = logprobs_json(c, ev, text);
    if (ev.finished()) {
      c.finish = ev.finish;
      c.error = ev.error;
      c.usage = ev.usage;
    }
    if (!streamed()) {
      c.text += text;
      if (!lp.is_null()) append_logprobs(c.logprobs, lp);
      return;
    }
    if (text.empty() && !ev.finished() && lp.is_null()) return;
    if (ev.finish == engine::FinishReason::kError || ev.finish == engine::FinishReason::kAbort) {
      *body += sse_data(error_body(500, "generation failed: " + (ev.error.empty() ? "aborted" : ev.error)));
      return;
    }
    Json choice = {{"index", i}, {"text", text}, {"logprobs", lp}, {"finish_reason", nullptr}};
    if (ev.finished()) choice["finish_reason"] = engine::finish_reason_name(ev.finish);
    *body += sse_data(json_text(chunk(Json::array({choice}))));
  }

  void on_complete(std::string* body, HttpResponse* response) override {
    int64_t prompt = 0, completion = 0, cached = 0;
    for (size_t i = 0; i < states_.size(); ++i) {
      const State& c = states_[i];
      if (i % size_t(params_.n) == 0) {  // each prompt counts once, whatever n is
        prompt += c.usage.prompt_tokens;
        cached += c.usage.cached_tokens;
      }
      completion += c.usage.completion_tokens;
    }
    if (streamed()) {
      if (params_.include_usage) {
        Json u = chunk(Json::array());
        u["usage"] = usage_json(prompt, completion, cached);
        *body += sse_data(json_text(u));
      }
      *body += "data: [DONE]\n\n";
      return;
    }
    Json choices = Json::array();
    for (size_t i = 0; i < states_.size(); ++i) {
      const State& c = states_[i];
      if (c.finish == engine::FinishReason::kError || c.finish == engine::FinishReason::kAbort) {
        *response = error_response(500, "generation failed: " + (c.error.empty() ? "aborted" : c.error));
        return;
      }
      choices.push_back({{"index", i},
                         {"text", c.text},
                         {"logprobs", c.logprobs},
                         {"finish_reason", engine::finish_reason_name(c.finish)}});
    }
    Json r = {{"id", id_},           {"object", "text_completion"},
              {"created", created_}, {"model", model_},
              {"choices", choices},  {"usage", usage_json(prompt, completion, cached)}};
    response->body = json_text(r);
  }

 private:
  struct State {
    size_t prompt = 0;
    bool echoed = false;
    std::string text;
    Json logprobs;
    size_t text_offset = 0;
    engine::FinishReason finish = engine::FinishReason::kNone;
    std::string error;
    engine::Usage usage;
  };

  Json chunk(Json choices) const {
    return {{"id", id_},
            {"object", "text_completion"},
            {"created", created_},
            {"model", model_},
            {"choices", std::move(choices)}};
  }

  Json logprobs_json(State& c, const engine::RequestEvent& ev, const std::string& text) {
    if (params_.sampling.num_logprobs < 0 || ev.logprobs.empty()) return nullptr;
    const auto& tok = ctx().tokenizer();
    Json tokens = Json::array(), values = Json::array(), tops = Json::array(), offsets = Json::array();
    for (const auto& st : ev.logprobs) {
      std::string piece;
      tok.decode_append(st.token, &piece);
      offsets.push_back(c.text_offset);
      c.text_offset += piece.size();
      tokens.push_back(std::move(piece));
      values.push_back(st.logprob);
      Json top = Json::object();
      for (const auto& [id, lp] : st.top) {
        std::string t;
        tok.decode_append(id, &t);
        top[t] = lp;
      }
      tops.push_back(std::move(top));
    }
    (void)text;
    return {{"tokens", tokens}, {"token_logprobs", values}, {"top_logprobs", tops}, {"text_offset", offsets}};
  }

  static void append_logprobs(Json& into, const Json& from) {
    if (into.is_null()) {
      into = from;
      return;
    }
    for (const char* k : {"tokens", "token_logprobs", "top_logprobs", "text_offset"})
      for (const auto& x : from[k]) into[k].push_back(x);
  }

  GenerationParams params_;
  std::string model_, id_;
  int64_t created_;
  std::vector<std::string> echo_;
  std::vector<State> states_;
};

}  // namespace

HttpResponse handle_completions(ServerContext& ctx, const HttpRequest& request) {
  const Json body = parse_json_body(request.body);
  JsonFields f(body, "");
  const auto model = f.string("model");
  ctx.check_model(model ? &*model : nullptr);
  GenerationParams params = read_generation_params(f, ApiKind::kCompletions);
  if (params.echo && params.sampling.num_logprobs >= 0)
    bad_request("echo", "echo: cannot be combined with logprobs (prompt logprobs are not computed)");
  if (const Json* bias = f.get("logit_bias"); bias && !(bias->is_object() && bias->empty()))
    bad_request("logit_bias", "logit_bias: not supported");
  f.ignore({"user", "metadata", "store", "service_tier"});
  // No Harmony here: a requested format constrains the whole output.
  const std::optional<RequestedFormat> format = read_vllm_format(f);
  const auto prompts = read_prompts(f.get("prompt"), ctx.tokenizer());
  f.reject_unknown();
  if (int64_t(prompts.size()) * params.n > kMaxChoices)
    bad_request("n", "n: {} prompts x n = {} choices; at most {} per request", prompts.size(), params.n,
                kMaxChoices);

  engine::ServingEngine& engine = ctx.engine();
  std::vector<int32_t> budgets;
  for (const auto& p : prompts)
    budgets.push_back(
        resolve_max_tokens(int64_t(p.size()), params.max_tokens, engine.max_model_len(), "prompt"));
  const auto structured = format ? StructuredOutput::for_completion(ctx, *format) : nullptr;
  std::vector<std::string> echo;
  if (params.echo)
    for (const auto& p : prompts) echo.push_back(ctx.tokenizer().decode(p));

  auto response =
      std::make_shared<CompletionResponse>(ctx, params, ctx.admit(int64_t(prompts.size()) * params.n),
                                           model.value_or(ctx.options().served_model_name), echo);
  for (size_t i = 0; i < prompts.size(); ++i) {
    for (int32_t j = 0; j < params.n; ++j) {
      engine::RequestSpec spec = make_request_spec(params, int32_t(i) * params.n + j, budgets[i]);
      spec.prompt = prompts[i];
      spec.stop_strings = params.stop;
      spec.decoder = std::make_unique<tokenizer::EngineTextDecoder>(ctx.tokenizer_ptr());
      if (structured) spec.constraint = structured->make();
      response->add(std::move(spec), i);
    }
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
