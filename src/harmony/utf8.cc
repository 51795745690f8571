#include "harmony/utf8.h"

#include <algorithm>

namespace orchid::harmony {
namespace {

bool is_cont(unsigned char b) {
  return (b & 0xC0) == 0x80;
}

// Length of the sequence a lead byte announces; 0 for bytes that cannot start one.
int sequence_width(unsigned char b) {
  if (b < 0x80) return 1;
  if (b >= 0xC2 && b <= 0xDF) return 2;
  if (b >= 0xE0 && b <= 0xEF) return 3;
  if (b >= 0xF0 && b <= 0xF4) return 4;
  return 0;
}

// The allowed range of the second byte, which excludes overlongs, surrogates and code points > U+10FFFF.
bool second_ok(unsigned char lead, unsigned char b) {
  switch (lead) {
    case 0xE0:
      return b >= 0xA0 && b <= 0xBF;
    case 0xED:
      return b >= 0x80 && b <= 0x9F;
    case 0xF0:
      return b >= 0x90 && b <= 0xBF;
    case 0xF4:
      return b >= 0x80 && b <= 0x8F;
    default:
      return is_cont(b);
  }
}

}  // namespace

Utf8Status check_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char lead = p[i];
    const int w = sequence_width(lead);
    if (w == 1) {
      ++i;
      continue;
    }
    Utf8Status bad{i, std::nullopt, false};
    if (w == 0) {
      bad.error_len = 1;
      return bad;
    }
    if (i + 1 >= n) return bad;
    if (!second_ok(lead, p[i + 1])) {
      bad.error_len = 1;
      return bad;
    }
    for (int k = 2; k < w; ++k) {
      if (i + k >= n) return bad;
      if (!is_cont(p[i + k])) {
        bad.error_len = static_cast<size_t>(k);
        return bad;
      }
    }
    i += static_cast<size_t>(w);
  }
  return Utf8Status{n, std::nullopt, true};
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  while (!bytes.empty()) {
    const Utf8Status st = check_utf8(bytes);
    out.append(bytes.substr(0, st.valid_up_to));
    if (st.valid) break;
    out.append(kReplacementChar);
    if (!st.error_len) break;  // truncated at the end: the rest is one replacement character
    bytes.remove_prefix(st.valid_up_to + *st.error_len);
  }
  return out;
}

bool is_unicode_whitespace(char32_t c) {
  if (c >= 0x09 && c <= 0x0D) return true;
  if (c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680) return true;
  if (c >= 0x2000 && c <= 0x200A) return true;
  return c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

char32_t next_code_point(std::string_view t, size_t* pos) {
  const auto* p = reinterpret_cast<const unsigned char*>(t.data());
  size_t i = *pos;
  const unsigned char b = p[i];
  int w = sequence_width(b);
  if (w <= 1) {
    *pos = i + 1;
    return b;
  }
  char32_t c = b & (0x7F >> w);
  for (int k = 1; k < w && i + k < t.size(); ++k) c = (c << 6) | (p[i + k] & 0x3F);
  *pos = std::min(t.size(), i + static_cast<size_t>(w));
  return c;
}

std::string_view trim_unicode(std::string_view text) {
  size_t begin = 0;
  while (begin < text.size()) {
    size_t next = begin;
    if (!is_unicode_whitespace(next_code_point(text, &next))) break;
    begin = next;
  }
  size_t end = begin;  // the end of the last non-whitespace character
  size_t pos = begin;
  while (pos < text.size()) {
    const char32_t c = next_code_point(text, &pos);
    if (!is_unicode_whitespace(c)) end = pos;
  }
  return text.substr(begin, end - begin);
}

}  // namespace orchid::harmony
