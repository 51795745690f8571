#include "harmony/json_text.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <vector>

#include "core/error.h"
#include "core/json_string.h"

namespace orchid::harmony {
namespace {

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
      append_json_string(out, v.get_ref<const std::string&>());
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
        append_json_string(out, k);
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

// serde_json's f64_from_parts: one multiplication or division by an exactly representable power of ten.
std::optional<double> from_parts(bool positive, uint64_t significand, int64_t exponent) {
  static const std::vector<double> kPow10 = [] {
    std::vector<double> p(309);
    for (int i = 0; i < 309; ++i) p[i] = std::strtod(("1e" + std::to_string(i)).c_str(), nullptr);
    return p;
  }();
  double f = static_cast<double>(significand);
  while (true) {
    const uint64_t e = static_cast<uint64_t>(exponent < 0 ? -exponent : exponent);
    if (e < kPow10.size()) {
      if (exponent >= 0) {
        f *= kPow10[e];
        if (std::isinf(f)) return std::nullopt;
      } else {
        f /= kPow10[e];
      }
      break;
    }
    if (f == 0.0) break;
    if (exponent >= 0) return std::nullopt;
    f /= 1e308;
    exponent += 308;
  }
  return positive ? f : -f;
}

bool would_overflow(uint64_t value, unsigned digit) {
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
  return value >= kMax / 10 && (value > kMax / 10 || digit > kMax % 10);
}

// Builds ordered_json like nlohmann's own DOM parser, but with serde's reading of fractional numbers.
class SerdeNumberSax : public nlohmann::detail::json_sax_dom_parser<Json> {
 public:
  using nlohmann::detail::json_sax_dom_parser<Json>::json_sax_dom_parser;
  bool number_float(double value, const std::string& lexeme) {
    std::optional<double> v = serde_parse_f64(lexeme);
    if (!v) throw Error("number out of range: " + lexeme);
    return json_sax_dom_parser::number_float(*v, lexeme);
  }
};

}  // namespace

std::optional<double> serde_parse_f64(std::string_view s) {
  size_t i = 0;
  const bool positive = !(i < s.size() && s[i] == '-');
  if (!positive) ++i;
  auto digit_at = [&](size_t k) { return k < s.size() && s[k] >= '0' && s[k] <= '9'; };
  uint64_t significand = 0;
  int64_t exponent = 0;
  bool overflowed = false;
  while (digit_at(i)) {  // integer part; digits past u64 only scale the exponent
    const unsigned d = static_cast<unsigned>(s[i] - '0');
    if (overflowed || would_overflow(significand, d)) {
      overflowed = true;
      ++exponent;
    } else {
      significand = significand * 10 + d;
    }
    ++i;
  }
  if (i < s.size() && s[i] == '.') {
    ++i;
    bool skip = false;
    while (digit_at(i)) {
      const unsigned d = static_cast<unsigned>(s[i] - '0');
      if (skip || would_overflow(significand, d)) {
        skip = true;  // serde ignores every further fractional digit
      } else {
        significand = significand * 10 + d;
        --exponent;
      }
      ++i;
    }
  } else if (i == s.size() && !overflowed) {
    // An integer that fits u64 but not i64 (negative): serde makes it a float.
    return positive ? static_cast<double>(significand) : -static_cast<double>(significand);
  }
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    bool positive_exp = true;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) positive_exp = s[i++] == '+';
    int64_t exp = 0;
    while (digit_at(i)) {
      const int d = s[i] - '0';
      if (exp >= std::numeric_limits<int32_t>::max() / 10 &&
          (exp > std::numeric_limits<int32_t>::max() / 10 || d > std::numeric_limits<int32_t>::max() % 10)) {
        if (significand != 0 && positive_exp) return std::nullopt;
        return positive ? 0.0 : -0.0;
      }
      exp = exp * 10 + d;
      ++i;
    }
    exponent = std::clamp<int64_t>(positive_exp ? exponent + exp : exponent - exp,
                                   std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max());
  }
  return from_parts(positive, significand, exponent);
}

Json parse_json(std::string_view text, const std::string& where) {
  Json result;
  SerdeNumberSax sax(result, true);
  try {
    Json::sax_parse(text, &sax);
  } catch (const Json::exception& e) {
    fail("{}: invalid JSON: {}", where, e.what());
  } catch (const Error& e) {
    fail("{}: {}", where, e.what());
  }
  return result;
}

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
