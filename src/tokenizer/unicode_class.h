// Character classes used by o200k's pre-tokenizer regex, one byte per code point. The tables follow Unicode
// 16.0, the version of the regex engine tiktoken (the oracle) uses; see
// tools/unicode/make_unicode_classes.py.
#pragma once

#include <cstdint>

namespace orchid::tokenizer {

// Bits of a class byte. Upperish is [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] and lowerish [\p{Ll}\p{Lm}\p{Lo}\p{M}]
// as written in the regex; space is Unicode White_Space (what `\s` means there); newline is \r or \n.
enum CharClass : uint8_t {
  kLetter = 1,
  kNumber = 2,
  kUpperish = 4,
  kLowerish = 8,
  kSpace = 16,
  kNewline = 32,
  // Never in the table: marks end of text, and (with no other bit) stands for bytes that are not UTF-8.
  kEndOfText = 64,
};

inline constexpr uint32_t kCodePointLimit = 0x110000;

// kCodePointLimit class bytes, built on first use; surrogates have class 0.
const uint8_t* char_class_table();

inline uint8_t char_class(uint32_t cp) {
  return cp < kCodePointLimit ? char_class_table()[cp] : 0;
}

}  // namespace orchid::tokenizer
