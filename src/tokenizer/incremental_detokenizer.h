// Turns a stream of token ids into text deltas that are always complete UTF-8: bytes of a character split
// across tokens (o200k has many such tokens, e.g. for emoji) are held back until the character is complete.
// Ill-formed bytes become U+FFFD, one per maximal ill-formed subpart, exactly as Python's
// `codecs.getincrementaldecoder("utf-8")(errors="replace")` does, so the concatenated deltas equal the
// lossy decoding of all the bytes at once.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "tokenizer/tokenizer.h"

namespace orchid::tokenizer {

// Byte-level half: bytes in, complete UTF-8 out.
class Utf8StreamDecoder {
 public:
  // The text that became complete with `bytes` (possibly empty).
  std::string push(std::string_view bytes);
  // The end of the stream: U+FFFD for a dangling partial character, then ready for a new stream.
  std::string flush();
  // Bytes held back: a proper prefix of a character (0..3 bytes).
  size_t pending() const { return pending_.size(); }

 private:
  std::string pending_;
};

// One per output stream (not thread-safe); the tokenizer must outlive it.
class IncrementalDetokenizer {
 public:
  explicit IncrementalDetokenizer(const Tokenizer& tokenizer) : tokenizer_(tokenizer) {}

  // The text delta completed by `id`. Throws orchid::Error for an id outside the vocabulary.
  std::string push(int32_t id);
  // As push(), but an unknown id ends any pending character and gives U+FFFD instead of throwing.
  std::string push_lossy(int32_t id);
  std::string flush() { return utf8_.flush(); }
  bool has_pending() const { return utf8_.pending() > 0; }

 private:
  const Tokenizer& tokenizer_;
  Utf8StreamDecoder utf8_;
  std::string bytes_;  // scratch, kept to avoid an allocation per token
};

}  // namespace orchid::tokenizer
