#include "server/cors.h"

#include <algorithm>

namespace orchid::server {

Cors::Cors(std::vector<std::string> allowed_origins) : allowed_(std::move(allowed_origins)) {
  any_ = std::find(allowed_.begin(), allowed_.end(), "*") != allowed_.end();
}

std::string Cors::allow_origin(const HttpRequest& request) const {
  if (any_) return "*";
  const std::string_view origin = request.header("origin");
  if (origin.empty() || std::find(allowed_.begin(), allowed_.end(), origin) == allowed_.end()) return {};
  return std::string(origin);
}

void Cors::add_headers(const HttpRequest& request, HttpResponse* response) const {
  const std::string origin = allow_origin(request);
  if (origin.empty()) return;
  response->headers.emplace_back("Access-Control-Allow-Origin", origin);
  // A listed origin is echoed, so caches must keep answers for different origins apart.
  if (!any_) response->headers.emplace_back("Vary", "Origin");
}

HttpResponse Cors::preflight(const HttpRequest& request) const {
  HttpResponse r;
  r.status = 204;
  r.content_type.clear();
  r.headers.emplace_back("Allow", "GET, POST, OPTIONS");
  add_headers(request, &r);
  if (allow_origin(request).empty()) return r;
  r.headers.emplace_back("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
  // The requested headers are granted as asked: a "*" would not cover Authorization (Fetch standard).
  const std::string_view asked = request.header("access-control-request-headers");
  r.headers.emplace_back("Access-Control-Allow-Headers",
                         asked.empty() ? std::string("Authorization, Content-Type") : std::string(asked));
  r.headers.emplace_back("Access-Control-Max-Age", "600");
  return r;
}

}  // namespace orchid::server
