#include "harmony/json_text.h"

#include <charconv>
#include <cmath>
#include <cstdlib>

#include "core/error.h"

namespace orchid::harmony {
namespace {

void append_escaped(const std::string& s, std::string* out) {
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

void append_value(const Json& v, std::string* out) {
  switch (v.type()) {
    case Json::value_t::null:
      out->append("null");
      break;
    case Json::value_t::boolean:
      out->append(v.get<bool>() ? "true" : "false");
      break;
    case Json::value_t::number_integer:
      out->append(std::to_string(v.get<int64_t>()));
      break;
    case Json::value_t::number_unsigned:
      out->append(std::to_string(v.get<uint64_t>()));
      break;
    case Json::value_t::number_float:
      out->append(ryu_format(v.get<double>()));
      break;
    case Json::value_t::string:
      append_escaped(v.get_ref<const std::string&>(), out);
      break;
    case Json::value_t::array: {
      out->push_back('[');
      bool first = true;
      for (const Json& e : v) {
        if (!first) out->push_back(',');
        first = false;
        append_value(e, out);
      }
      out->push_back(']');
      break;
    }
    case Json::value_t::object: {
      out->push_back('{');
      bool first = true;
      for (const auto& [k, e] : v.items()) {
        if (!first) out->push_back(',');
        first = false;
        append_escaped(k, out);
        out->push_back(':');
        append_value(e, out);
      }
      out->push_back('}');
      break;
    }
    case Json::value_t::binary:
    case Json::value_t::discarded:
      out->append("null");
      break;
  }
}

}  // namespace

std::string ryu_format(double value) {
  if (!std::isfinite(value)) return "null";
  std::string out;
  if (std::signbit(value)) {
    out.push_back('-');
    value = -value;
  }
  if (value == 0.0) return out + "0.0";
  // Shortest round-trip digits (the same digits Ryu picks), laid out the way Ryu's pretty printer does.
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, value, std::chars_format::scientific);
  ORCHID_CHECK(res.ec == std::errc(), "to_chars failed");
  std::string sci(buf, res.ptr);
  const size_t e_pos = sci.find('e');
  std::string digits;
  for (size_t i = 0; i < e_pos; ++i) {
    if (sci[i] != '.') digits.push_back(sci[i]);
  }
  const int exp10 = std::atoi(sci.c_str() + e_pos + 1);  // value = d.ddd * 10^exp10
  const int length = static_cast<int>(digits.size());
  const int k = exp10 - (length - 1);  // value = digits * 10^k
  const int kk = length + k;           // 10^(kk-1) <= value < 10^kk
  if (k >= 0 && kk <= 16) {
    out += digits;
    out.append(static_cast<size_t>(k), '0');
    out += ".0";
  } else if (kk > 0 && kk <= 16) {
    out += digits.substr(0, static_cast<size_t>(kk));
    out += '.';
    out += digits.substr(static_cast<size_t>(kk));
  } else if (kk > -5 && kk <= 0) {
    out += "0.";
    out.append(static_cast<size_t>(-kk), '0');
    out += digits;
  } else {
    out += digits[0];
    if (length > 1) {
      out += '.';
      out += digits.substr(1);
    }
    out += 'e';
    out += std::to_string(kk - 1);
  }
  return out;
}

std::string compact_json(const Json& value) {
  std::string out;
  append_value(value, &out);
  return out;
}

}  // namespace orchid::harmony
