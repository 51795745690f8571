// How the regex behaves, alternative by alternative (the first alternative that matches at a position wins,
// and within one, greedy quantifiers backtrack). P1 = [^\r\n\p{L}\p{N}], UP/LO = the two letter-ish classes,
// P4 = [^\s\p{L}\p{N}], C = the optional case-insensitive contraction ('s 't 're 've 'm 'll 'd; 'ſ folds to
// 's).
//  1. P1? UP* LO+ C?   Take the prefix if there is one and the rest matches, else try without it. UP* first
//                      takes the whole UP run; if the next character is LO, LO+ extends over the LO run after
//                      it; otherwise UP* gives characters back until one is LO (Lm/Lo/M are both), which ends
//                      the match. No LO in reach: the alternative fails.
//  2. P1? UP+ LO* C?   Only reached when 1 failed: the UP run, then any LO run, then C.
//  3. N{1,3}
//  4. ' '? P4+ [\r\n/]*
//  5. \s*[\r\n]+       A whitespace run that contains \r or \n ends after its last \r or \n.
//  6. \s+(?!\S)        Otherwise the whole run at the end of text, or all of it but its last character (which
//                      then prefixes the next piece) when it is at least two characters long;
//  7. \s+              else the single whitespace character.
#include "tokenizer/pretokenizer.h"

#include <cstdint>

#include "tokenizer/unicode_class.h"
#include "tokenizer/utf8.h"

namespace orchid::tokenizer {
namespace {

constexpr size_t kNoMatch = static_cast<size_t>(-1);

struct Char {
  uint8_t cls;  // CharClass bits
  uint8_t len;  // bytes
};

class Scanner {
 public:
  Scanner(std::string_view text)
      : s_(reinterpret_cast<const unsigned char*>(text.data())),
        n_(text.size()),
        table_(char_class_table()) {}

  size_t piece_end(size_t p) const {
    const Char c0 = at(p);
    if (!(c0.cls & (kNumber | kNewline))) {
      size_t r = letters_then_lower(p, c0);
      if (r == kNoMatch) r = letters_upper_run(p, c0);
      if (r != kNoMatch) return contraction_end(r);
    }
    if (c0.cls & kNumber) {
      size_t i = p + c0.len;
      for (int k = 1; k < 3; ++k) {
        Char c = at(i);
        if (!(c.cls & kNumber)) break;
        i += c.len;
      }
      return i;
    }
    if (s_[p] == ' ' && is_p4(at(p + 1))) return punct_run(p + 1);
    if (is_p4(c0)) return punct_run(p);
    return space_run(p, c0);
  }

 private:
  Char at(size_t i) const {
    if (i >= n_) return {kEndOfText, 0};
    const unsigned b = s_[i];
    if (b < 0x80) return {table_[b], 1};
    Utf8Step st = read_utf8(s_ + i, n_ - i);
    if (st.status != Utf8Step::kValid) return {0, 1};
    return {table_[st.cp], static_cast<uint8_t>(st.len)};
  }

  static bool is_p1(Char c) { return !(c.cls & (kLetter | kNumber | kNewline | kEndOfText)); }
  static bool is_p4(Char c) { return !(c.cls & (kSpace | kLetter | kNumber | kEndOfText)); }

  // UP* LO+ from q: the end of the match or kNoMatch.
  size_t upper_then_lower(size_t q) const {
    size_t i = q, last_lower_end = kNoMatch;
    Char c = at(i);
    while (c.cls & kUpperish) {
      if (c.cls & kLowerish) last_lower_end = i + c.len;
      i += c.len;
      c = at(i);
    }
    if (!(c.cls & kLowerish)) return last_lower_end;
    do {
      i += c.len;
      c = at(i);
    } while (c.cls & kLowerish);
    return i;
  }

  // Alternative 1 without its contraction.
  size_t letters_then_lower(size_t p, Char c0) const {
    if (is_p1(c0)) {
      size_t r = upper_then_lower(p + c0.len);
      if (r != kNoMatch) return r;
    }
    if (c0.cls & (kUpperish | kLowerish)) return upper_then_lower(p);
    return kNoMatch;
  }

  // Alternative 2 without its contraction.
  size_t letters_upper_run(size_t p, Char c0) const {
    size_t i = p;
    if (is_p1(c0) && (at(p + c0.len).cls & kUpperish)) {
      i = p + c0.len;
    } else if (!(c0.cls & kUpperish)) {
      return kNoMatch;
    }
    Char c = at(i);
    while (c.cls & kUpperish) i += c.len, c = at(i);
    while (c.cls & kLowerish) i += c.len, c = at(i);
    return i;
  }

  static bool ascii_ieq(unsigned char c, char lower) {
    return (c | 0x20) == static_cast<unsigned char>(lower);
  }

  size_t contraction_end(size_t r) const {
    if (r + 1 >= n_ || s_[r] != '\'') return r;
    const unsigned char c = s_[r + 1];
    if (ascii_ieq(c, 's') || ascii_ieq(c, 't') || ascii_ieq(c, 'm') || ascii_ieq(c, 'd')) return r + 2;
    if (c == 0xC5 && r + 2 < n_ && s_[r + 2] == 0xBF) return r + 3;  // U+017F LATIN SMALL LETTER LONG S
    if (r + 2 < n_) {
      const unsigned char d = s_[r + 2];
      if ((ascii_ieq(c, 'r') || ascii_ieq(c, 'v')) && ascii_ieq(d, 'e')) return r + 3;
      if (ascii_ieq(c, 'l') && ascii_ieq(d, 'l')) return r + 3;
    }
    return r;
  }

  // P4+ [\r\n/]* from i, where at(i) is P4.
  size_t punct_run(size_t i) const {
    Char c = at(i);
    while (is_p4(c)) i += c.len, c = at(i);
    while (i < n_ && (s_[i] == '\r' || s_[i] == '\n' || s_[i] == '/')) ++i;
    return i;
  }

  // Alternatives 5 to 7 at p, where c0 is whitespace.
  size_t space_run(size_t p, Char c0) const {
    size_t i = p, last_newline_end = kNoMatch, last_start = p, count = 0;
    Char c = c0;
    while (c.cls & kSpace) {
      if (c.cls & kNewline) last_newline_end = i + c.len;
      last_start = i;
      i += c.len;
      ++count;
      c = at(i);
    }
    if (last_newline_end != kNoMatch) return last_newline_end;
    if (i == n_ || count == 1) return i;
    return last_start;
  }

  const unsigned char* s_;
  size_t n_;
  const uint8_t* table_;
};

}  // namespace

size_t o200k_piece_end(std::string_view text, size_t pos) {
  return Scanner(text).piece_end(pos);
}

std::vector<std::string_view> o200k_pieces(std::string_view text) {
  std::vector<std::string_view> pieces;
  Scanner scanner(text);
  for (size_t p = 0; p < text.size();) {
    size_t e = scanner.piece_end(p);
    pieces.push_back(text.substr(p, e - p));
    p = e;
  }
  return pieces;
}

}  // namespace orchid::tokenizer
