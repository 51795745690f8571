#include "server/api_error.h"

#include <nlohmann/json.hpp>

namespace orchid::server {

std::string_view error_type(int status) {
  switch (status) {
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 429:
      return "rate_limit_error";
    case 503:
      return "service_unavailable_error";
    default:
      return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

std::string error_body(int status, std::string_view message, std::string_view param, std::string_view code) {
  nlohmann::json e = {
      {"message", message}, {"type", error_type(status)}, {"param", nullptr}, {"code", nullptr}};
  if (!param.empty()) e["param"] = param;
  if (!code.empty()) e["code"] = code;
  // Messages may quote client input that is not UTF-8; replace rather than throw.
  return nlohmann::json{{"error", e}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

HttpResponse error_response(int status, std::string_view message, std::string_view param,
                            std::string_view code) {
  HttpResponse r;
  r.status = status;
  r.body = error_body(status, message, param, code);
  return r;
}

HttpResponse error_response(const ApiError& e) {
  return error_response(e.status(), e.what(), e.param(), e.code());
}

}  // namespace orchid::server
