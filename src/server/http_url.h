// An http:// address as the load generator and a decode instance's prefill client take it:
// http://HOST[:PORT][/PREFIX], a trailing /v1 dropped from the prefix.
#pragma once

#include <string>
#include <string_view>

namespace orchid::server {

struct HttpUrl {
  std::string host, port, base;  // base: the path prefix before /v1 (usually empty)
};

// Throws orchid::Error naming `what` (the flag) for anything else (https included).
HttpUrl parse_http_url(const std::string& url, std::string_view what);

}  // namespace orchid::server
