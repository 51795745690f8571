// The OpenAI-compatible server: routes, API-key check, CORS, serving phases (503 while loading and draining),
// and the mapping of every failure to an OpenAI error object. The APIs themselves live in *_api.cc.
#pragma once

#include <chrono>
#include <memory>
#include <optional>

#include "server/http_server.h"
#include "server/server_context.h"

namespace orchid::server {

class Cors;

class OpenAIServer {
 public:
  OpenAIServer(ServerContext& ctx, HttpServerOptions http);
  ~OpenAIServer();

  // Binds and serves (503 until the context has an engine). Throws orchid::Error if it cannot bind.
  void start();
  int port() const { return http_->port(); }
  // Graceful shutdown: new requests get 503 and no new connections are taken; requests in progress go on.
  void begin_drain();
  // No request is being answered.
  bool idle() const;
  // Closes every connection (cutting off responses in progress) and stops the HTTP threads.
  void stop();

  // The answer to a whole request, with the CORS headers; never throws.
  HttpResponse handle(const HttpRequest& request);
  // Before the body is read: 401 for a /v1 request without the API key, so its body is never read.
  std::optional<HttpResponse> screen(const HttpRequest& head) const;

 private:
  HttpResponse answer(const HttpRequest& request);
  HttpResponse route(const HttpRequest& request);
  bool authorized(const HttpRequest& request) const;
  static HttpResponse unauthorized();

  ServerContext& ctx_;
  std::unique_ptr<Cors> cors_;
  std::unique_ptr<HttpServer> http_;
};

// Equal strings, in time that depends only on the length of `given` (not on where they differ).
bool constant_time_equal(std::string_view given, std::string_view expected);

}  // namespace orchid::server
