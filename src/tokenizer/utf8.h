// UTF-8 helpers shared by the pre-tokenizer and the detokenizers. Invalid input is handled the way Unicode
// recommends (and Python's errors="replace" does): each maximal subpart of an ill-formed sequence becomes one
// U+FFFD.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace orchid::tokenizer {

inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

// Result of reading one sequence at the front of a byte range.
struct Utf8Step {
  uint32_t cp;   // the code point; meaningless unless status == kValid
  uint32_t len;  // bytes taken: the character, or the maximal ill-formed subpart (>= 1)
  enum Status : uint8_t { kValid, kInvalid, kTruncated } status;  // kTruncated: a valid prefix cut by the end
};

// Reads the sequence at s[0..n), n > 0.
Utf8Step read_utf8(const unsigned char* s, size_t n);

bool is_valid_utf8(std::string_view bytes);

// `bytes` with every ill-formed subpart (including a truncated one at the end) replaced by U+FFFD.
std::string to_valid_utf8(std::string_view bytes);

// Appends the UTF-8 encoding of a scalar value.
void append_utf8(uint32_t cp, std::string* out);

}  // namespace orchid::tokenizer
