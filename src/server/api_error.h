// OpenAI-style errors: every failure a client sees is {"error": {"message", "type", "param", "code"}} with
// an HTTP status that fits. Request handlers throw ApiError; the router turns it (and orchid::Error, which
// means a bad request) into the response.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <string_view>

#include "server/http_server.h"

namespace orchid::server {

class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string message, std::string param = {}, std::string code = {})
      : std::runtime_error(std::move(message)),
        status_(status),
        param_(std::move(param)),
        code_(std::move(code)) {}

  int status() const { return status_; }
  const std::string& param() const { return param_; }
  const std::string& code() const { return code_; }

 private:
  int status_;
  std::string param_;
  std::string code_;
};

// A 400 naming the parameter.
template <typename... Args>
[[noreturn]] void bad_request(std::string param, fmt::format_string<Args...> f, Args&&... args) {
  throw ApiError(400, fmt::format(f, std::forward<Args>(args)...), std::move(param));
}

// "invalid_request_error" for 4xx, "server_error" for 5xx, with a few more specific ones.
std::string_view error_type(int status);
// The error object as JSON text.
std::string error_body(int status, std::string_view message, std::string_view param = {},
                       std::string_view code = {});
HttpResponse error_response(int status, std::string_view message, std::string_view param = {},
                            std::string_view code = {});
HttpResponse error_response(const ApiError& e);

}  // namespace orchid::server
