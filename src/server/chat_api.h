// POST /v1/chat/completions on Harmony: messages (with assistant `reasoning`/`reasoning_content` and
// `tool_calls`, and tool results) become a Harmony conversation; the output comes back as `reasoning` (and
// its `reasoning_content` alias), `content` and `tool_calls`, streamed as chunks or in one response.
#pragma once

#include "server/http_server.h"
#include "server/server_context.h"

namespace orchid::server {

HttpResponse handle_chat_completions(ServerContext& ctx, const HttpRequest& request);

}  // namespace orchid::server
