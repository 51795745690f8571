#include "tokenizer/pretokenizer.h"

#include <gtest/gtest.h>

#include <random>

#include "test_data.h"
#include "tokenizer/pcre2_pretokenizer.h"
#include "tokenizer/unicode_class.h"
#include "tokenizer/utf8.h"

namespace orchid::tokenizer {
namespace {

std::string join(const std::vector<std::string_view>& pieces) {
  std::string out;
  for (auto p : pieces) out.append(p);
  return out;
}

TEST(Pretokenizer, PiecesTileAnyBytes) {
  std::mt19937 rng(3);
  for (int i = 0; i < 20000; ++i) {
    std::string s(rng() % 40, '\0');
    for (char& c : s) c = static_cast<char>(rng());
    auto pieces = o200k_pieces(s);
    for (auto p : pieces) ASSERT_FALSE(p.empty());
    ASSERT_EQ(join(pieces), s);
  }
}

// The scanner against PCRE2 running the regex itself, on random strings over an alphabet chosen to exercise
// every alternative and the backtracking between them. Code points where PCRE2's (older) Unicode tables
// disagree with orchid's are left out of the alphabet.
TEST(Pretokenizer, MatchesPcre2OnRandomText) {
  Pcre2Pretokenizer pcre2;
  const uint32_t candidates[] = {
      'a',     'b',     's',    'S',    't',     'r',     'e',     'E',    'v',    'l',    'L',
      'm',     'd',     'D',    'A',    'Z',     '\'',    '\'',    ' ',    ' ',    ' ',    '\t',
      '\n',    '\r',    '\v',   '\f',   '/',     '!',     '.',     '-',    '_',    '0',    '7',
      '<',     '|',     '>',    0x85,   0xA0,    0x17F,   0x1C5,   0x1C8,  0x2B0,  0x2BC,  0x300,
      0x301,   0x345,   0x3A3,  0x3C3,  0x430,   0x416,   0x5D0,   0x627,  0x64B,  0x660,  0x915,
      0x93F,   0x94D,   0x966,  0xE01,  0xE31,   0x1680,  0x2003,  0x2028, 0x2029, 0x202F, 0x205F,
      0x2160,  0x2460,  0x3000, 0x3005, 0x3042,  0x30FC,  0x4E2D,  0xAC00, 0xFF10, 0xFF21, 0xFF41,
      0x1F600, 0x1F3FD, 0x200D, 0xFE0F, 0x1D7CE, 0x10400, 0x10428, 0xBD,   0xB2,   0x1F1FA};
  std::vector<std::string> alphabet;
  for (uint32_t cp : candidates) {
    if (pcre2.char_class(cp) != char_class(cp)) continue;
    std::string s;
    append_utf8(cp, &s);
    alphabet.push_back(s);
  }
  ASSERT_GT(alphabet.size(), std::size(candidates) * 9 / 10) << "PCRE2 Unicode " << pcre2.unicode_version();
  std::mt19937 rng(5);
  for (int i = 0; i < 100000; ++i) {
    std::string s;
    const size_t n = rng() % 24;
    for (size_t k = 0; k < n; ++k) s += alphabet[rng() % alphabet.size()];
    ASSERT_EQ(o200k_pieces(s), pcre2.pieces(s)) << "text: " << s;
  }
}

TEST(Pretokenizer, MatchesPcre2OnCorpusWhereTablesAgree) {
  Pcre2Pretokenizer pcre2;
  std::vector<uint8_t> agree(kCodePointLimit, 0);  // 0 unknown, 1 yes, 2 no
  size_t compared = 0;
  for (const std::string& doc : testing::corpus()) {
    bool ok = true;
    auto* s = reinterpret_cast<const unsigned char*>(doc.data());
    for (size_t i = 0; i < doc.size() && ok;) {
      Utf8Step st = read_utf8(s + i, doc.size() - i);
      ASSERT_EQ(st.status, Utf8Step::kValid);
      i += st.len;
      if (agree[st.cp] == 0) agree[st.cp] = pcre2.char_class(st.cp) == char_class(st.cp) ? 1 : 2;
      ok = agree[st.cp] == 1;
    }
    if (!ok) continue;
    ASSERT_EQ(o200k_pieces(doc), pcre2.pieces(doc)) << doc.substr(0, 200);
    ++compared;
  }
  EXPECT_GT(compared, testing::corpus().size() / 2);
}

}  // namespace
}  // namespace orchid::tokenizer
