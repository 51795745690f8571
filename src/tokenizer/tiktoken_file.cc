#include <algorithm>
#include <array>
#include <charconv>

#include "core/error.h"
#include "tokenizer/vocabulary.h"

namespace orchid::tokenizer {
namespace {

std::array<int8_t, 256> base64_table() {
  std::array<int8_t, 256> t;
  t.fill(-1);
  const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  for (int i = 0; i < 64; ++i) t[static_cast<unsigned char>(alphabet[i])] = static_cast<int8_t>(i);
  return t;
}

// Appends the decoded bytes; false if `in` is not padded base64.
bool decode_base64(std::string_view in, std::string* out) {
  static const std::array<int8_t, 256> table = base64_table();
  if (in.empty() || in.size() % 4 != 0) return false;
  size_t pad = 0;
  while (pad < 2 && in[in.size() - 1 - pad] == '=') ++pad;
  uint32_t acc = 0;
  size_t bits = 0;
  for (size_t i = 0; i < in.size() - pad; ++i) {
    int v = table[static_cast<unsigned char>(in[i])];
    if (v < 0) return false;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out->push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  return true;
}

}  // namespace

Vocabulary parse_tiktoken_ranks(std::string_view text, const std::string& source) {
  struct Entry {
    int32_t rank;
    uint32_t offset, len;
  };
  std::vector<Entry> entries;
  std::string arena;
  size_t line_no = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    std::string_view line = text.substr(pos, eol - pos);
    pos = eol + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    const size_t sp = line.find(' ');
    if (sp == std::string_view::npos) fail("{}:{}: expected 'base64 rank'", source, line_no);
    const uint32_t offset = static_cast<uint32_t>(arena.size());
    if (!decode_base64(line.substr(0, sp), &arena)) fail("{}:{}: invalid base64", source, line_no);
    std::string_view num = line.substr(sp + 1);
    int32_t rank = -1;
    auto [end, ec] = std::from_chars(num.data(), num.data() + num.size(), rank);
    if (ec != std::errc() || end != num.data() + num.size() || rank < 0) {
      fail("{}:{}: invalid rank '{}'", source, line_no, num);
    }
    entries.push_back({rank, offset, static_cast<uint32_t>(arena.size()) - offset});
  }
  if (entries.empty()) fail("{}: no ranks", source);
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.rank < b.rank; });
  Vocabulary v;
  v.source = source;
  v.bytes.reserve(arena.size());
  v.offsets.reserve(entries.size() + 1);
  for (size_t i = 0; i < entries.size(); ++i) {
    if (entries[i].rank != static_cast<int32_t>(i)) {
      fail("{}: ranks must be 0..{} with each used once; rank {} is {}", source, entries.size() - 1, i,
           entries[i].rank > static_cast<int32_t>(i) ? "missing" : "repeated");
    }
    v.offsets.push_back(static_cast<uint32_t>(v.bytes.size()));
    v.bytes.append(arena, entries[i].offset, entries[i].len);
  }
  v.offsets.push_back(static_cast<uint32_t>(v.bytes.size()));
  return v;
}

}  // namespace orchid::tokenizer
