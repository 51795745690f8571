#include "tokenizer/byte_level.h"

#include "tokenizer/utf8.h"

namespace orchid::tokenizer {

const std::array<uint16_t, 256>& byte_level_code_points() {
  static const std::array<uint16_t, 256> table = [] {
    std::array<uint16_t, 256> t;
    uint16_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      t[b] = printable ? static_cast<uint16_t>(b) : next++;
    }
    return t;
  }();
  return table;
}

const std::array<int16_t, kByteLevelCodePoints>& byte_level_bytes() {
  static const std::array<int16_t, kByteLevelCodePoints> table = [] {
    std::array<int16_t, kByteLevelCodePoints> t;
    t.fill(-1);
    for (int b = 0; b < 256; ++b) t[byte_level_code_points()[b]] = static_cast<int16_t>(b);
    return t;
  }();
  return table;
}

std::string to_byte_level(std::string_view bytes) {
  const auto& cps = byte_level_code_points();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) append_utf8(cps[b], &out);
  return out;
}

}  // namespace orchid::tokenizer
