// Request targets as the routes see them: the path percent-decoded (RFC 3986 §2.1), so that a model id
// with a slash finds its route whether the client escaped it (`/v1/models/openai%2Fgpt-oss-20b`, as the
// OpenAI SDK does) or not.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace orchid::server {

// The path with every %XX replaced by its byte; nullopt for an escape that is not two hex digits and for
// %00 (a NUL byte has no business in a route and would cut C strings short). '+' stays '+': form
// encoding applies to query strings, not paths.
std::optional<std::string> percent_decode_path(std::string_view path);

}  // namespace orchid::server
