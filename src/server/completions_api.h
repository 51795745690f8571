// POST /v1/completions: raw text (or token ids) in, raw text out, no chat format. Special-token literals in
// a text prompt become their ids, so a hand-written Harmony prompt works; the output shows them as text.
#pragma once

#include "server/http_server.h"
#include "server/server_context.h"

namespace orchid::server {

HttpResponse handle_completions(ServerContext& ctx, const HttpRequest& request);

}  // namespace orchid::server
