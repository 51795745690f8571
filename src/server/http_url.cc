#include "server/http_url.h"

#include "core/error.h"

namespace orchid::server {

HttpUrl parse_http_url(const std::string& url, std::string_view what) {
  const std::string scheme = "http://";
  if (url.rfind("https://", 0) == 0) fail("{} {}: https is not supported (use http://)", what, url);
  if (url.rfind(scheme, 0) != 0) fail("{} {}: expected http://HOST[:PORT][/PREFIX]", what, url);
  std::string rest = url.substr(scheme.size());
  HttpUrl u;
  const size_t slash = rest.find('/');
  if (slash != std::string::npos) {
    u.base = rest.substr(slash);
    rest = rest.substr(0, slash);
    while (!u.base.empty() && u.base.back() == '/') u.base.pop_back();
    if (u.base.size() >= 3 && u.base.compare(u.base.size() - 3, 3, "/v1") == 0)
      u.base.resize(u.base.size() - 3);
  }
  const size_t colon = rest.rfind(':');
  u.host = colon == std::string::npos ? rest : rest.substr(0, colon);
  u.port = colon == std::string::npos ? "80" : rest.substr(colon + 1);
  if (u.host.empty() || u.port.empty() || u.port.find_first_not_of("0123456789") != std::string::npos)
    fail("{} {}: expected http://HOST[:PORT][/PREFIX]", what, url);
  return u;
}

}  // namespace orchid::server
