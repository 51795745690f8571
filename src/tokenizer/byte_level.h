// GPT-2's byte-level alphabet, which Hugging Face byte-level BPE files use to write token bytes as text:
// printable bytes stand for themselves, the other 68 map to U+0100.. in byte order.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace orchid::tokenizer {

// The highest code point of the alphabet is U+0143.
inline constexpr uint32_t kByteLevelCodePoints = 0x144;

// byte -> code point.
const std::array<uint16_t, 256>& byte_level_code_points();
// code point -> byte, -1 for code points outside the alphabet.
const std::array<int16_t, kByteLevelCodePoints>& byte_level_bytes();

// The UTF-8 text that stands for `bytes`.
std::string to_byte_level(std::string_view bytes);

}  // namespace orchid::tokenizer
