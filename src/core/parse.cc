#include "core/parse.h"

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace orchid {

namespace {
std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\n' || s.front() == '\r'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\n' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}
}  // namespace

int64_t parse_int(std::string_view text, std::string_view what) {
  auto t = trim(text);
  int64_t v = 0;
  auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (t.empty() || ec != std::errc() || p != t.data() + t.size())
    fail("{}: '{}' is not an integer{}", what, text, ec == std::errc::result_out_of_range ? " in range" : "");
  return v;
}

double parse_double(std::string_view text, std::string_view what) {
  std::string t(trim(text));
  if (t.empty()) fail("{}: empty value, expected a number", what);
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(t.c_str(), &end);
  if (end != t.c_str() + t.size() || errno == ERANGE) fail("{}: '{}' is not a number", what, text);
  return v;
}

std::vector<int64_t> parse_int_list(std::string_view text, std::string_view what) {
  std::vector<int64_t> out;
  auto t = trim(text);
  if (!t.empty() && t.front() == '[' && t.back() == ']') t = trim(t.substr(1, t.size() - 2));  // JSON array
  if (t.empty()) return out;
  size_t start = 0;
  while (start <= t.size()) {
    size_t comma = t.find(',', start);
    if (comma == std::string_view::npos) comma = t.size();
    auto item = trim(t.substr(start, comma - start));
    if (item.empty()) fail("{}: empty item at character {} of '{}'", what, start, text);
    out.push_back(parse_int(item, what));
    start = comma + 1;
  }
  return out;
}

std::string read_text_file(const std::string& path, std::string_view what) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("{}: cannot open '{}'", what, path);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace orchid
