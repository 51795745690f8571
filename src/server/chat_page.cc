#include "server/chat_page.h"

#include <fmt/format.h>

#include "server/api_error.h"

namespace orchid::server {

namespace {

constexpr std::string_view kIndex = "index.html";
constexpr std::string_view kFilePrefix = "/chat/";

std::string_view content_type_of(std::string_view name) {
  if (name.ends_with(".html")) return "text/html; charset=utf-8";
  if (name.ends_with(".js")) return "text/javascript; charset=utf-8";
  if (name.ends_with(".css")) return "text/css; charset=utf-8";
  if (name.ends_with(".svg")) return "image/svg+xml";
  return "application/octet-stream";
}

const EmbeddedFile* find_file(std::string_view name) {
  for (const EmbeddedFile& f : chat_page_files())
    if (f.name == name) return &f;
  return nullptr;
}

// The file a path names, or nullptr when the path is not the page's.
const EmbeddedFile* file_for_path(std::string_view path) {
  if (path == "/" || path == "/chat" || path == "/chat/") return find_file(kIndex);
  if (!path.starts_with(kFilePrefix)) return nullptr;
  return find_file(path.substr(kFilePrefix.size()));
}

// Does If-None-Match (a list of entity tags, or "*") name `etag`?
bool matches_etag(std::string_view if_none_match, std::string_view etag) {
  if (if_none_match.empty()) return false;
  if (if_none_match == "*") return true;
  size_t pos = 0;
  while (pos < if_none_match.size()) {
    size_t end = if_none_match.find(',', pos);
    if (end == std::string_view::npos) end = if_none_match.size();
    std::string_view tag = if_none_match.substr(pos, end - pos);
    while (!tag.empty() && (tag.front() == ' ' || tag.front() == '\t')) tag.remove_prefix(1);
    while (!tag.empty() && (tag.back() == ' ' || tag.back() == '\t')) tag.remove_suffix(1);
    if (tag.starts_with("W/")) tag.remove_prefix(2);  // weak comparison, as RFC 9110 prescribes here
    if (tag == etag) return true;
    pos = end + 1;
  }
  return false;
}

}  // namespace

std::optional<HttpResponse> chat_page_response(const HttpRequest& r) {
  const EmbeddedFile* file = file_for_path(r.path);
  if (!file) return std::nullopt;
  if (r.method != "GET")
    throw ApiError(405, fmt::format("{} {}: method not allowed (use GET)", r.method, r.path));

  HttpResponse res;
  res.content_type = std::string(content_type_of(file->name));
  const std::string etag = fmt::format("\"{}\"", file->sha256.substr(0, 32));
  // no-cache: the browser may keep a copy but asks every time, so a new binary's page is seen at once and
  // an unchanged one costs a 304. The policy keeps the page to its own origin: no inline script, no other
  // hosts, not framed; model output is only ever inserted as text, this is the second line of defence.
  res.headers = {
      {"Cache-Control", "no-cache"},
      {"ETag", etag},
      {"X-Content-Type-Options", "nosniff"},
      {"Referrer-Policy", "no-referrer"},
      {"Content-Security-Policy",
       "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"},
  };
  if (matches_etag(r.header("if-none-match"), etag)) {
    res.status = 304;
    return res;
  }
  res.body = std::string(file->bytes);
  return res;
}

}  // namespace orchid::server
