// UTF-8 checks with the exact semantics of Rust's std::str::from_utf8 / String::from_utf8_lossy, which
// openai-harmony's streaming parser relies on: where a bad sequence starts, how long it is (the "maximal
// subpart" rule) and whether the input merely stops in the middle of a character.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace orchid::harmony {

struct Utf8Status {
  size_t valid_up_to = 0;           // bytes [0, valid_up_to) are valid UTF-8
  std::optional<size_t> error_len;  // length of the bad sequence there; nullopt: input ends mid-character
  bool valid = true;                // the whole input is valid
};

Utf8Status check_utf8(std::string_view bytes);

// Each bad sequence (and a truncated one at the end) becomes one U+FFFD.
std::string utf8_lossy(std::string_view bytes);

inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

// Rust's char::is_whitespace (the Unicode White_Space property); Python's str.isspace differs on U+001C-1F.
bool is_unicode_whitespace(char32_t c);

// Decodes the code point starting at `pos` of valid UTF-8 and advances `pos`.
char32_t next_code_point(std::string_view text, size_t* pos);

// Rust's str::trim(): strips Unicode whitespace from both ends of valid UTF-8.
std::string_view trim_unicode(std::string_view text);

}  // namespace orchid::harmony
