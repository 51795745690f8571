// A JSON string literal as serde_json and Python's json (ensure_ascii=False) write it: UTF-8 kept as is; only
// the quote, the backslash and control characters escaped (\b \f \n \r \t by name, others as \u00xx).
// Shared by the Harmony renderer's compact JSON and the tokenizer file writer, which must both match those
// writers byte for byte.
#pragma once

#include <string>
#include <string_view>

namespace orchid {

inline void append_json_string(std::string* out, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  out->push_back('"');
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        out->append("\\\"");
        break;
      case '\\':
        out->append("\\\\");
        break;
      case '\b':
        out->append("\\b");
        break;
      case '\f':
        out->append("\\f");
        break;
      case '\n':
        out->append("\\n");
        break;
      case '\r':
        out->append("\\r");
        break;
      case '\t':
        out->append("\\t");
        break;
      default:
        if (c < 0x20) {
          out->append("\\u00");
          out->push_back(kHex[c >> 4]);
          out->push_back(kHex[c & 15]);
        } else {
          out->push_back(ch);
        }
    }
  }
  out->push_back('"');
}

}  // namespace orchid
