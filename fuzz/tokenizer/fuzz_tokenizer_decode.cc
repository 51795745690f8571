// Random id lists (in and just outside the vocabulary) -> decode, decode_append, the incremental detokenizer.
// Invariants: unknown ids are rejected without crashing; the detokenizer's deltas are valid UTF-8 and add up
// to the lossy decoding of all the bytes; encoding the decoded bytes gives them back.
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "fuzz_check.h"
#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

using namespace orchid::tokenizer;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const auto tok = Tokenizer::builtin();
  const int32_t vocab = tok->vocab_size();
  // Three bytes per id, spread over [-8, vocab + 8).
  std::vector<int32_t> ids;
  for (size_t i = 0; i + 3 <= size; i += 3) {
    const uint32_t v = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16);
    ids.push_back(static_cast<int32_t>(v % static_cast<uint32_t>(vocab + 16)) - 8);
  }

  std::string appended, valid_bytes, streamed;
  bool any_unknown = false;
  IncrementalDetokenizer detok(*tok);
  for (int32_t id : ids) {
    const bool known = id >= 0 && id < vocab;
    const size_t before = appended.size();
    FUZZ_CHECK(tok->decode_append(id, &appended) == known);
    if (!known) {
      FUZZ_CHECK(appended.size() == before);
      any_unknown = true;
      bool threw = false;
      try {
        detok.push(id);
      } catch (const orchid::Error&) {
        threw = true;
      }
      FUZZ_CHECK(threw);
      continue;
    }
    valid_bytes.append(appended, before, std::string::npos);
    std::string delta = detok.push(id);
    FUZZ_CHECK(is_valid_utf8(delta));
    streamed += delta;
  }
  const bool had_pending = detok.has_pending();
  const std::string tail = detok.flush();
  FUZZ_CHECK(tail.empty() != had_pending);
  streamed += tail;
  FUZZ_CHECK(streamed == to_valid_utf8(valid_bytes));

  try {
    const std::string decoded = tok->decode(ids);
    FUZZ_CHECK(!any_unknown);
    FUZZ_CHECK(decoded == appended);
  } catch (const orchid::Error&) {
    FUZZ_CHECK(any_unknown);
  }

  if (valid_bytes.size() <= 256) {  // longer ones are the encode target's job; this keeps runs fast
    FUZZ_CHECK(tok->decode(tok->encode_ordinary(valid_bytes)) == valid_bytes);
  }
  return 0;
}
