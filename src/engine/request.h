// A generation request as submitted to the engine, and the events its stream delivers.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/text_decoder.h"
#include "engine/token_constraint.h"
#include "runtime/backend.h"

namespace orchid::engine {

struct RequestSpec {
  std::vector<int32_t> prompt;
  runtime::SamplingParams sampling;  // sampling.seed is ignored: see `seed`
  std::optional<uint64_t> seed;      // none: the engine draws one
  std::vector<int32_t> stop_token_ids;
  std::vector<std::string> stop_strings;  // need `decoder`
  bool include_stop_str_in_output = false;
  bool ignore_eos = false;               // the model's EOS ids do not stop the request
  int32_t max_tokens = -1;               // -1: until the context is full
  int32_t min_tokens = 0;                // stop ids and EOS are never drawn before this many tokens
  int32_t priority = 0;                  // lower runs first; equal priorities run in arrival order
  std::unique_ptr<TextDecoder> decoder;  // optional; gives events their text and enables stop strings
  // Optional: limits every sampled token (structured outputs); needs a backend that applies token masks.
  std::unique_ptr<TokenConstraint> constraint;
  // Prefill/decode disaggregation, on a backend that hands K/V over. kv_export: the final event carries the
  // sequence's K/V as it stood at the end (RequestEvent::kv). kv_import: K/V of this prompt's leading
  // positions, computed by another instance of the same model and layout: written into this engine's pages
  // at admission, so only the rest of the prompt (at least its last token) is computed here.
  // kv_share: with kv_export, hand the K/V over in place over this transport (runtime/kv_share.h) when the
  // backend exports over it and its buffer has room; otherwise as bytes. An import that is shared is mapped
  // at submission (an error there refuses the request) and dropped, the prompt then computed here, when its
  // lease would expire before admission.
  bool kv_export = false;
  std::string kv_share;
  int32_t kv_share_ranks =
      0;  // the receiver's tensor-parallel ranks (0: unknown): some transports need equal
  std::shared_ptr<const runtime::KvPages> kv_import;
};

// Checks a request against the model and the engine's limits; throws orchid::Error naming the field.
void validate_request(const RequestSpec& spec, int32_t vocab_size, int32_t max_model_len);

enum class FinishReason : uint8_t { kNone, kStop, kLength, kAbort, kError };
std::string_view finish_reason_name(FinishReason r);  // "stop", "length", "abort", "error"

struct Usage {
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;
  int32_t cached_tokens = 0;    // prompt tokens served from the prefix cache at first admission
  int32_t imported_tokens = 0;  // prompt tokens whose K/V were handed over (RequestSpec::kv_import)
  int32_t num_preemptions = 0;
};

// One delivery on a request's stream. Token ids are the raw generation, delivered as soon as sampled; the
// text (with a decoder) is held back while its tail could begin a stop string and never goes past a stop.
struct RequestEvent {
  std::vector<int32_t> token_ids;
  std::vector<runtime::SampledToken> logprobs;  // one per id when the request asked for logprobs
  std::string text;
  FinishReason finish = FinishReason::kNone;   // set on the last event of the stream only
  int32_t stop_token = -1;                     // kStop by a stop id or EOS
  std::string stop_string;                     // kStop by a stop string
  std::string error;                           // kError
  Usage usage;                                 // set on the last event
  std::shared_ptr<const runtime::KvPages> kv;  // the last event of a kv_export request

  bool finished() const { return finish != FinishReason::kNone; }
};

}  // namespace orchid::engine
