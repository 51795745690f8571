// Incremental detokenization, as the engine needs it for stop strings. The engine sits below the tokenizer,
// so upper layers supply an implementation (the tokenizer's incremental detokenizer); tests use a toy one.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace orchid::engine {

class TextDecoder {
 public:
  virtual ~TextDecoder() = default;
  // Feeds the next output id; returns the text it completes: whole UTF-8 characters only, so a character
  // split over several tokens appears once all its bytes have arrived (possibly an empty string).
  virtual std::string append(int32_t id) = 0;
  // End of the stream: whatever is still held back (an incomplete character), in the decoder's rendering.
  virtual std::string flush() { return {}; }
};

}  // namespace orchid::engine
