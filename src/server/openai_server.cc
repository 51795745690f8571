#include "server/openai_server.h"

#include <spdlog/spdlog.h>

#include "core/error.h"
#include "server/api_error.h"
#include "server/chat_api.h"
#include "server/chat_page.h"
#include "server/completions_api.h"
#include "server/cors.h"
#include "server/json_body.h"
#include "server/prometheus.h"
#include "server/responses_api.h"

namespace orchid::server {

bool constant_time_equal(std::string_view given, std::string_view expected) {
  if (expected.empty()) return given.empty();
  volatile unsigned char diff = given.size() != expected.size();
  for (size_t i = 0; i < given.size(); ++i)
    diff = diff |
           (static_cast<unsigned char>(given[i]) ^ static_cast<unsigned char>(expected[i % expected.size()]));
  return diff == 0;
}

OpenAIServer::OpenAIServer(ServerContext& ctx, HttpServerOptions http)
    : ctx_(ctx), cors_(std::make_unique<Cors>(ctx.options().allowed_origins)) {
  HttpHandlers h;
  h.handle = [this](const HttpRequest& r) { return handle(r); };
  h.errors = [this](int status, const std::string& message) {
    HttpResponse res = error_response(status, message);
    cors_->add_headers({}, &res);
    return res;
  };
  h.screen = [this](const HttpRequest& head) { return screen(head); };
  // Answered from memory in microseconds; everything with a prompt goes to the request threads.
  h.answer_inline = [](const HttpRequest& r) {
    return r.method == "OPTIONS" || r.path == "/health" || r.path == "/metrics" || r.path == "/v1/models" ||
           r.path.starts_with("/v1/models/");
  };
  http_ = std::make_unique<HttpServer>(std::move(http), std::move(h));
}

OpenAIServer::~OpenAIServer() {
  stop();
}

void OpenAIServer::start() {
  http_->start();
}

void OpenAIServer::begin_drain() {
  ctx_.begin_draining();
  http_->stop_accepting();
}

bool OpenAIServer::idle() const {
  return http_->counters().requests_active == 0 && ctx_.requests_in_flight() == 0;
}

void OpenAIServer::stop() {
  if (http_) http_->stop();
}

bool OpenAIServer::authorized(const HttpRequest& r) const {
  const std::string& key = ctx_.options().api_key;
  if (key.empty()) return true;
  std::string_view auth = r.header("authorization");
  constexpr std::string_view kBearer = "Bearer ";
  if (auth.size() < kBearer.size() ||
      !std::equal(kBearer.begin(), kBearer.end(), auth.begin(), [](char a, char b) {
        return std::tolower(static_cast<unsigned char>(a)) == std::tolower(static_cast<unsigned char>(b));
      }))
    return false;
  return constant_time_equal(auth.substr(kBearer.size()), key);
}

std::optional<HttpResponse> OpenAIServer::screen(const HttpRequest& head) const {
  // Preflights carry no credentials (browsers never send them there); handle() answers them.
  if (head.method == "OPTIONS" || !head.path.starts_with("/v1/") || authorized(head)) return std::nullopt;
  HttpResponse res = unauthorized();
  cors_->add_headers(head, &res);
  return res;
}

HttpResponse OpenAIServer::handle(const HttpRequest& request) {
  if (request.method == "OPTIONS") return cors_->preflight(request);
  HttpResponse res = answer(request);
  cors_->add_headers(request, &res);
  return res;
}

HttpResponse OpenAIServer::answer(const HttpRequest& request) {
  try {
    return route(request);
  } catch (const ApiError& e) {
    if (e.status() >= 500) spdlog::warn("{} {}: {}", request.method, request.path, e.what());
    return error_response(e);
  } catch (const Error& e) {
    return error_response(400, e.what());
  } catch (const std::bad_alloc&) {
    spdlog::error("{} {}: out of memory", request.method, request.path);
    HttpResponse res = error_response(503, "the server ran out of memory for this request; retry later");
    res.headers.emplace_back("Retry-After", "1");
    return res;
  } catch (const std::exception& e) {
    spdlog::error("{} {}: {}", request.method, request.path, e.what());
    return error_response(500, "internal error while handling the request");
  }
}

HttpResponse OpenAIServer::unauthorized() {
  return error_response(401, "Incorrect API key provided. Pass it as `Authorization: Bearer KEY`.", {},
                        "invalid_api_key");
}

namespace {

HttpResponse json_response(const Json& j, int status = 200) {
  HttpResponse r;
  r.status = status;
  r.body = json_text(j);
  return r;
}

void require_method(const HttpRequest& r, std::string_view method) {
  if (r.method != method)
    throw ApiError(405, fmt::format("{} {}: method not allowed (use {})", r.method, r.path, method));
}

}  // namespace

HttpResponse OpenAIServer::route(const HttpRequest& r) {
  const std::string& path = r.path;
  if (path == "/health") {
    require_method(r, "GET");
    if (ctx_.phase() != Phase::kReady)
      throw ApiError(503, ctx_.phase() == Phase::kLoading ? "loading" : "draining");
    return json_response({{"status", "ok"}});
  }
  if (path == "/metrics") {
    require_method(r, "GET");
    ServerMetrics s;
    s.http = http_->counters();
    s.requests_in_flight = ctx_.requests_in_flight();
    s.requests_rejected = ctx_.requests_rejected();
    s.ready = ctx_.phase() == Phase::kReady;
    if (const RemotePrefill* p = ctx_.remote_prefill()) s.remote_prefill = p->counters();
    std::optional<engine::EngineMetrics> em;
    if (engine::ServingEngine* e = ctx_.engine_if_loaded()) em = e->metrics();
    HttpResponse res;
    res.content_type = "text/plain; version=0.0.4; charset=utf-8";
    res.body = prometheus_text(em ? &*em : nullptr, s);
    return res;
  }
  // The page itself needs no key: it holds nothing, and asks for the key to make its API calls.
  if (ctx_.options().chat_page)
    if (std::optional<HttpResponse> page = chat_page_response(r)) return std::move(*page);
  if (path.starts_with("/v1/")) {
    if (!authorized(r)) return unauthorized();  // screen() turned it away already when served over HTTP
    if (path == "/v1/models" || path.starts_with("/v1/models/")) {
      require_method(r, "GET");
      const ServerOptions& o = ctx_.options();
      Json card = {{"id", o.served_model_name},
                   {"object", "model"},
                   {"created", unix_time()},
                   {"owned_by", "orchid"},
                   {"root", o.model_path}};
      if (engine::ServingEngine* e = ctx_.engine_if_loaded()) card["max_model_len"] = e->max_model_len();
      if (path == "/v1/models") return json_response({{"object", "list"}, {"data", Json::array({card})}});
      const std::string id = path.substr(std::string_view("/v1/models/").size());
      ctx_.check_model(&id);
      return json_response(card);
    }
    if (path == "/v1/chat/completions") {
      require_method(r, "POST");
      return handle_chat_completions(ctx_, r);
    }
    if (path == "/v1/responses") {
      require_method(r, "POST");
      return handle_responses(ctx_, r);
    }
    if (path == "/v1/completions") {
      require_method(r, "POST");
      return handle_completions(ctx_, r);
    }
    if (path == "/v1/internal/prefill" && ctx_.options().role == "prefill") {
      require_method(r, "POST");
      return handle_internal_prefill(ctx_, r);
    }
    if (path == "/v1/internal/release" && ctx_.options().role == "prefill") {
      require_method(r, "POST");
      return handle_internal_release(ctx_, r);
    }
  }
  throw ApiError(404, fmt::format("{} {}: no such route", r.method, path), {}, "not_found");
}

}  // namespace orchid::server
