#include "tokenizer/utf8.h"

namespace orchid::tokenizer {

Utf8Step read_utf8(const unsigned char* s, size_t n) {
  const unsigned b0 = s[0];
  if (b0 < 0x80) return {b0, 1, Utf8Step::kValid};
  // Length and the allowed range of the second byte (Unicode Table 3-7): the narrow ranges after E0, ED, F0
  // and F4 exclude overlong forms, surrogates and values above U+10FFFF.
  uint32_t need;
  unsigned lo = 0x80, hi = 0xBF;
  uint32_t cp;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1, cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2, cp = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3, cp = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return {0, 1, Utf8Step::kInvalid};
  }
  for (uint32_t i = 1; i <= need; ++i) {
    if (i >= n) return {0, i, Utf8Step::kTruncated};
    const unsigned b = s[i];
    if (b < lo || b > hi) return {0, i, Utf8Step::kInvalid};
    lo = 0x80, hi = 0xBF;
    cp = (cp << 6) | (b & 0x3F);
  }
  return {cp, need + 1, Utf8Step::kValid};
}

bool is_valid_utf8(std::string_view bytes) {
  auto* s = reinterpret_cast<const unsigned char*>(bytes.data());
  size_t i = 0, n = bytes.size();
  while (i < n) {
    if (s[i] < 0x80) {
      ++i;
      continue;
    }
    Utf8Step st = read_utf8(s + i, n - i);
    if (st.status != Utf8Step::kValid) return false;
    i += st.len;
  }
  return true;
}

std::string to_valid_utf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  auto* s = reinterpret_cast<const unsigned char*>(bytes.data());
  size_t i = 0, n = bytes.size();
  while (i < n) {
    Utf8Step st = read_utf8(s + i, n - i);
    if (st.status == Utf8Step::kValid) {
      out.append(bytes.data() + i, st.len);
    } else {
      out.append(kReplacementChar);
    }
    i += st.len;
  }
  return out;
}

void append_utf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace orchid::tokenizer
