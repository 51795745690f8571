// The request fields that become sampling parameters and limits, shared by /v1/chat/completions,
// /v1/completions and /v1/responses: OpenAI names and ranges, plus the vLLM extras (top_k, min_p,
// repetition_penalty, min_tokens, ignore_eos) where orchid has the same knob.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/request.h"
#include "runtime/sampling_params.h"
#include "server/json_body.h"

namespace orchid::server {

enum class ApiKind { kChat, kCompletions, kResponses };

struct GenerationParams {
  runtime::SamplingParams sampling;  // num_logprobs: -1 unless logprobs were asked for
  std::optional<uint64_t> seed;
  std::optional<int64_t> max_tokens;  // none: up to the end of the context (completions: 16)
  int32_t min_tokens = 0;
  bool ignore_eos = false;
  std::vector<std::string> stop;
  int32_t n = 1;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool echo = false;           // completions only
};

// Reads (and marks read) the fields `api` knows; throws ApiError 400 naming the first bad one.
GenerationParams read_generation_params(JsonFields& f, ApiKind api);

// The output budget the engine gets: what was asked, or all the context the prompt leaves. Throws ApiError
// 400 with the numbers when the prompt, or the prompt plus what was asked, does not fit.
int32_t resolve_max_tokens(int64_t prompt_tokens, std::optional<int64_t> requested, int32_t max_model_len,
                           std::string_view prompt_param);

// An engine request with the sampling part of `p` for choice `index` (seeded requests give each choice its
// own seed, so n > 1 choices differ). The caller adds the prompt, stop ids and decoder.
engine::RequestSpec make_request_spec(const GenerationParams& p, int32_t index, int32_t max_tokens);

}  // namespace orchid::server
