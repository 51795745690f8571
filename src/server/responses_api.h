// POST /v1/responses on Harmony: `input` (a string, or message / function_call / function_call_output /
// reasoning items), `instructions` and function `tools` become a Harmony conversation; the output is a list
// of `reasoning` (reasoning_text), `message` (output_text) and `function_call` items, returned whole or as
// the Responses event stream (response.created ... response.completed).
#pragma once

#include "server/http_server.h"
#include "server/server_context.h"

namespace orchid::server {

HttpResponse handle_responses(ServerContext& ctx, const HttpRequest& request);

}  // namespace orchid::server
