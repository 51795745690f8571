#include "server/sampling_request.h"

#include <limits>

#include "server/api_error.h"

namespace orchid::server {

namespace {

constexpr int64_t kMaxTokensLimit = std::numeric_limits<int32_t>::max();
constexpr size_t kMaxStopStrings = 16;
constexpr size_t kMaxStopBytes = 1024;

std::vector<std::string> read_stop(JsonFields& f) {
  const Json* v = f.get("stop");
  if (!v) return {};
  std::vector<std::string> out;
  if (v->is_string()) {
    out.push_back(v->get<std::string>());
  } else if (v->is_array()) {
    if (v->size() > kMaxStopStrings)
      bad_request("stop", "stop: {} strings; at most {} are allowed", v->size(), kMaxStopStrings);
    for (const auto& s : *v) {
      if (!s.is_string()) bad_request("stop", "stop: expected strings, got {}", json_type_name(s));
      out.push_back(s.get<std::string>());
    }
  } else {
    bad_request("stop", "stop: expected a string or an array of strings, got {}", json_type_name(*v));
  }
  for (const auto& s : out) {
    if (s.empty()) bad_request("stop", "stop: empty stop strings are not allowed");
    if (s.size() > kMaxStopBytes)
      bad_request("stop", "stop: a stop string is longer than {} bytes", kMaxStopBytes);
  }
  return out;
}

}  // namespace

GenerationParams read_generation_params(JsonFields& f, ApiKind api) {
  GenerationParams p;
  runtime::SamplingParams& s = p.sampling;
  if (auto v = f.number("temperature", 0.0, 2.0)) s.temperature = float(*v);
  if (auto v = f.number("top_p", 0.0, 1.0)) {
    if (*v <= 0) bad_request(f.name("top_p"), "{}: must be greater than 0", f.name("top_p"));
    s.top_p = float(*v);
  }
  if (auto v = f.boolean("stream")) p.stream = *v;

  if (api == ApiKind::kResponses) {
    p.max_tokens = f.integer("max_output_tokens", 1, kMaxTokensLimit);
    return p;
  }

  if (auto v = f.integer("top_k", -1, std::numeric_limits<int32_t>::max()))
    s.top_k = int32_t(*v < 0 ? 0 : *v);
  if (auto v = f.number("min_p", 0.0, 1.0)) s.min_p = float(*v);
  if (auto v = f.number("frequency_penalty", -2.0, 2.0)) s.frequency_penalty = float(*v);
  if (auto v = f.number("presence_penalty", -2.0, 2.0)) s.presence_penalty = float(*v);
  if (auto v = f.number("repetition_penalty", 0.0, 100.0)) {
    if (*v <= 0) bad_request("repetition_penalty", "repetition_penalty: must be greater than 0");
    s.repetition_penalty = float(*v);
  }
  if (auto v = f.integer("seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()))
    p.seed = uint64_t(*v);
  if (auto v = f.integer("n", 1, 64)) p.n = int32_t(*v);
  if (auto v = f.integer("min_tokens", 0, kMaxTokensLimit)) p.min_tokens = int32_t(*v);
  if (auto v = f.boolean("ignore_eos")) p.ignore_eos = *v;
  p.stop = read_stop(f);

  if (api == ApiKind::kChat) {
    auto legacy = f.integer("max_tokens", 1, kMaxTokensLimit);
    auto current = f.integer("max_completion_tokens", 1, kMaxTokensLimit);
    p.max_tokens = current ? current : legacy;
    const bool logprobs = f.boolean("logprobs").value_or(false);
    auto top = f.integer("top_logprobs", 0, 20);
    if (top && !logprobs) bad_request("top_logprobs", "top_logprobs: requires logprobs to be true");
    if (logprobs) s.num_logprobs = int32_t(top.value_or(0));
  } else {
    p.max_tokens = f.integer("max_tokens", 1, kMaxTokensLimit).value_or(16);
    if (auto v = f.integer("logprobs", 0, 20)) s.num_logprobs = int32_t(*v);
    p.echo = f.boolean("echo").value_or(false);
    if (auto v = f.integer("best_of", 1, 64); v && *v != p.n)
      bad_request("best_of", "best_of: only best_of = n is supported (got {} with n = {})", *v, p.n);
    if (auto v = f.string("suffix"); v && !v->empty())
      bad_request("suffix", "suffix: insertion (suffix) is not supported");
  }

  if (const Json* so = f.get("stream_options")) {
    if (!p.stream) bad_request("stream_options", "stream_options: only allowed when stream is true");
    JsonFields o(*so, "stream_options");
    p.include_usage = o.boolean("include_usage").value_or(false);
    o.ignore({"continuous_usage_stats", "include_obfuscation"});
    o.reject_unknown();
  }
  if (p.min_tokens > 0 && p.max_tokens && p.min_tokens > *p.max_tokens)
    bad_request("min_tokens", "min_tokens: {} is more than max_tokens ({})", p.min_tokens, *p.max_tokens);
  return p;
}

int32_t resolve_max_tokens(int64_t prompt_tokens, std::optional<int64_t> requested, int32_t max_model_len,
                           std::string_view prompt_param) {
  if (prompt_tokens >= max_model_len)
    throw ApiError(
        400,
        fmt::format("This model's maximum context length is {} tokens. However, your request has {} "
                    "input tokens, which leaves no room for output. Please reduce the length of the "
                    "input.",
                    max_model_len, prompt_tokens),
        std::string(prompt_param), "context_length_exceeded");
  if (requested && prompt_tokens + *requested > max_model_len)
    throw ApiError(400,
                   fmt::format("This model's maximum context length is {} tokens. However, you requested {} "
                               "tokens ({} in the input, {} for the output). Please reduce the length of the "
                               "input or of the output.",
                               max_model_len, prompt_tokens + *requested, prompt_tokens, *requested),
                   std::string(prompt_param), "context_length_exceeded");
  return int32_t(requested ? *requested : max_model_len - prompt_tokens);
}

engine::RequestSpec make_request_spec(const GenerationParams& p, int32_t index, int32_t max_tokens) {
  engine::RequestSpec spec;
  spec.sampling = p.sampling;
  if (p.seed) spec.seed = *p.seed + uint64_t(index);
  spec.max_tokens = max_tokens;
  spec.min_tokens = std::min(p.min_tokens, max_tokens);
  spec.ignore_eos = p.ignore_eos;
  return spec;
}

}  // namespace orchid::server
