// Cross-origin access for browser clients: preflights (OPTIONS) answered with what may be sent, and
// Access-Control-Allow-Origin on every response. Browsers send no credentials on a preflight, so it is
// answered before the API key check; the real request that follows carries the key.
#pragma once

#include <string>
#include <vector>

#include "server/http_server.h"

namespace orchid::server {

class Cors {
 public:
  // Origins as browsers send them ("https://app.example.com"); "*" allows every origin (the default, as
  // vLLM's); empty: no cross-origin access at all.
  explicit Cors(std::vector<std::string> allowed_origins);

  // 204 with the methods, headers and max age a browser may use for this route.
  HttpResponse preflight(const HttpRequest& request) const;
  // Adds Access-Control-Allow-Origin when the request's origin is allowed.
  void add_headers(const HttpRequest& request, HttpResponse* response) const;

 private:
  // The Access-Control-Allow-Origin value for this request, or "" when its origin is not allowed.
  std::string allow_origin(const HttpRequest& request) const;

  std::vector<std::string> allowed_;
  bool any_ = false;
};

}  // namespace orchid::server
