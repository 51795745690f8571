#include "harmony/header.h"

#include <fmt/format.h>

#include "core/error.h"
#include "harmony/tokens.h"
#include "harmony/utf8.h"

namespace orchid::harmony {
namespace {

bool is_ascii_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\f' || c == '\r';
}

std::vector<std::string> split_ascii_whitespace(std::string_view s) {
  std::vector<std::string> parts;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && is_ascii_space(s[i])) ++i;
    const size_t start = i;
    while (i < s.size() && !is_ascii_space(s[i])) ++i;
    if (i > start) parts.emplace_back(s.substr(start, i - start));
  }
  return parts;
}

std::string replace_all(std::string s, std::string_view from, std::string_view to) {
  size_t pos = 0;
  while ((pos = s.find(from, pos)) != std::string::npos) {
    s.replace(pos, from.size(), to);
    pos += to.size();
  }
  return s;
}

std::string strip_to(const std::string& s) {
  return s.starts_with("to=") ? s.substr(3) : s;
}

}  // namespace

HeaderParse parse_header(std::string_view text, const HeaderParseOptions& opt) {
  HeaderParse out;
  std::string h(text);

  // The channel value runs to the first whitespace or '<' (so "<|channel|>final<|constrain|>json" works).
  if (size_t idx = h.find(kChannelLiteral); idx != std::string::npos) {
    const std::string_view after = std::string_view(h).substr(idx + kChannelLiteral.size());
    size_t end = 0;
    while (end < after.size()) {
      size_t next = end;
      const char32_t c = next_code_point(after, &next);
      if (c == '<' || is_unicode_whitespace(c)) break;
      end = next;
    }
    if (end == 0) {
      if (!opt.lenient) fail("harmony: channel marker present but no channel value found in header");
      out.repairs.push_back("empty channel value ignored");
    } else {
      out.header.channel = std::string(after.substr(0, end));
    }
    h = h.substr(0, idx) + std::string(after.substr(end));
  }
  h = std::string(trim_unicode(h));
  // A content type glued to the recipient ("to=f<|constrain|>json") must become its own word.
  if (h.find(kConstrainLiteral) != std::string::npos) {
    static const std::string kSpacedConstrain = fmt::format(" {}", kConstrainLiteral);
    h = std::string(trim_unicode(replace_all(h, kConstrainLiteral, kSpacedConstrain)));
  }
  std::vector<std::string> parts = split_ascii_whitespace(h);

  Role role = opt.fallback_role;
  std::optional<std::string> role_word;
  if (opt.role) {
    role = *opt.role;
  } else if (parts.empty()) {
    if (!opt.lenient) fail("harmony: message header did not contain a role");
    out.repairs.push_back("header without a role; assumed " + std::string(role_name(role)));
  } else {
    role_word = parts.front();
    if (auto r = role_from_name(parts.front())) {
      role = *r;
    } else if (parts.size() > 1 || parts.front().starts_with("to=")) {
      // "browser.search to=assistant": a tool speaking; the first word is its name.
      parts.erase(parts.begin());
      role = Role::kTool;
    } else {
      if (!opt.lenient) fail("harmony: unknown role '{}' in message header", parts.front());
      out.repairs.push_back("unknown role '" + parts.front() + "' read as a tool name");
      parts.erase(parts.begin());
      role = Role::kTool;
    }
  }
  if (!parts.empty() && parts.front() == role_name(role)) parts.erase(parts.begin());

  if (opt.parse_recipient_and_type && !parts.empty()) {
    const size_t count = parts.size();
    std::string last = parts.back();
    parts.pop_back();
    if (last.starts_with("to=")) {
      out.header.recipient = last.substr(3);
    } else if (count == 1) {
      out.header.recipient = last;
    } else {
      out.header.content_type = last;
      out.header.recipient = strip_to(parts.back());
      parts.pop_back();
    }
  }
  if (!parts.empty()) {
    std::string joined;
    for (size_t i = 0; i < parts.size(); ++i) joined += (i ? " " : "") + parts[i];
    out.leftover = std::move(joined);
  }
  out.header.author.role = role;
  // openai-harmony names a tool author after the header's first word, even when that word is "tool".
  if (role == Role::kTool) out.header.author.name = role_word;
  return out;
}

}  // namespace orchid::harmony
