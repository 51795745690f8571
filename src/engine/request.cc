#include "engine/request.h"

#include <cmath>

#include "core/error.h"

namespace orchid::engine {

std::string_view finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kNone:
      return "none";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kAbort:
      return "abort";
    case FinishReason::kError:
      return "error";
  }
  return "?";
}

void validate_request(const RequestSpec& spec, int32_t vocab_size, int32_t max_model_len) {
  if (spec.prompt.empty()) fail("prompt: no tokens");
  for (size_t i = 0; i < spec.prompt.size(); ++i) {
    if (spec.prompt[i] < 0 || spec.prompt[i] >= vocab_size)
      fail("prompt: token {} at index {} is outside the vocabulary [0, {})", spec.prompt[i], i, vocab_size);
  }
  if (int64_t(spec.prompt.size()) >= max_model_len)
    fail("prompt: {} tokens, but the context holds {} (max_model_len) including at least one generated token",
         spec.prompt.size(), max_model_len);
  const auto& p = spec.sampling;
  if (!std::isfinite(p.temperature) || p.temperature < 0)
    fail("temperature: {} (must be >= 0)", p.temperature);
  if (p.top_k < 0) fail("top_k: {} (0 disables it; must be >= 0)", p.top_k);
  if (!(p.top_p > 0 && p.top_p <= 1)) fail("top_p: {} (must be in (0, 1])", p.top_p);
  if (!(p.min_p >= 0 && p.min_p <= 1)) fail("min_p: {} (must be in [0, 1])", p.min_p);
  if (!(p.frequency_penalty >= -2 && p.frequency_penalty <= 2))
    fail("frequency_penalty: {} (must be in [-2, 2])", p.frequency_penalty);
  if (!(p.presence_penalty >= -2 && p.presence_penalty <= 2))
    fail("presence_penalty: {} (must be in [-2, 2])", p.presence_penalty);
  if (!(std::isfinite(p.repetition_penalty) && p.repetition_penalty > 0))
    fail("repetition_penalty: {} (must be > 0)", p.repetition_penalty);
  if (p.num_logprobs < -1 || p.num_logprobs > 20) fail("logprobs: {} (must be in [0, 20])", p.num_logprobs);
  if (spec.max_tokens == 0 || spec.max_tokens < -1) fail("max_tokens: {} (must be >= 1)", spec.max_tokens);
  if (spec.min_tokens < 0) fail("min_tokens: {} (must be >= 0)", spec.min_tokens);
  if (spec.max_tokens > 0 && spec.min_tokens > spec.max_tokens)
    fail("min_tokens: {} is more than max_tokens ({})", spec.min_tokens, spec.max_tokens);
  for (int32_t id : spec.stop_token_ids)
    if (id < 0 || id >= vocab_size)
      fail("stop_token_ids: {} is outside the vocabulary [0, {})", id, vocab_size);
  for (const auto& s : spec.stop_strings)
    if (s.empty()) fail("stop: empty stop string");
  if (!spec.stop_strings.empty() && !spec.decoder)
    fail("stop: stop strings need a detokenizer for this request");
}

}  // namespace orchid::engine
