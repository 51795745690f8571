// The built-in chat page: a static HTML/CSS/JS client of this server's own OpenAI API, served from the binary
// (assets/chat in the repository, embedded at build time). It loads without the API key, since it holds no
// data; the API calls it makes carry the key the user types in.
#pragma once

#include <optional>
#include <span>

#include "server/embedded_file.h"
#include "server/http_server.h"

namespace orchid::server {

// The page's files (generated from assets/chat).
std::span<const EmbeddedFile> chat_page_files();

// The response for `GET /`, `/chat` and the page's own files under /chat/; nullopt for any other path.
// Other methods on those paths get ApiError 405. Answers 304 when If-None-Match names the current file.
std::optional<HttpResponse> chat_page_response(const HttpRequest& request);

}  // namespace orchid::server
