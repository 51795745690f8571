#include "tokenizer/utf8.h"

#include <gtest/gtest.h>

#include <random>

namespace orchid::tokenizer {
namespace {

Utf8Step read(std::string_view s) {
  return read_utf8(reinterpret_cast<const unsigned char*>(s.data()), s.size());
}

TEST(Utf8, EveryScalarValueRoundTrips) {
  for (uint32_t cp = 0; cp < 0x110000; ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    std::string s;
    append_utf8(cp, &s);
    Utf8Step st = read(s);
    ASSERT_EQ(st.status, Utf8Step::kValid) << cp;
    ASSERT_EQ(st.cp, cp);
    ASSERT_EQ(st.len, s.size());
  }
}

// Accepting exactly the shortest encodings of scalar values is what well-formed means: every accepted 1..3
// byte sequence must re-encode to itself (no overlong forms, no surrogates), and the count must match.
TEST(Utf8, AcceptsOnlyShortestFormsOfScalars) {
  size_t accepted = 0;
  for (uint32_t v = 0; v < (1u << 24); ++v) {
    const unsigned char b[3] = {static_cast<unsigned char>(v >> 16), static_cast<unsigned char>(v >> 8),
                                static_cast<unsigned char>(v)};
    Utf8Step st = read_utf8(b, 3);
    if (st.status != Utf8Step::kValid || st.len != 3) continue;
    std::string again;
    append_utf8(st.cp, &again);
    ASSERT_EQ(again, std::string(reinterpret_cast<const char*>(b), 3)) << v;
    ASSERT_FALSE(st.cp >= 0xD800 && st.cp <= 0xDFFF);
    ++accepted;
  }
  EXPECT_EQ(accepted, 0x10000u - 0x800u - 0x800u);  // three-byte scalars: U+0800..U+FFFF minus surrogates
  std::mt19937 rng(7);
  for (int i = 0; i < 2000000; ++i) {
    uint32_t v = rng();
    const unsigned char b[4] = {static_cast<unsigned char>(0xF0 | ((v >> 24) & 0x0F)),
                                static_cast<unsigned char>(v >> 16), static_cast<unsigned char>(v >> 8),
                                static_cast<unsigned char>(v)};
    Utf8Step st = read_utf8(b, 4);
    if (st.status != Utf8Step::kValid) continue;
    std::string again;
    append_utf8(st.cp, &again);
    ASSERT_EQ(again, std::string(reinterpret_cast<const char*>(b), 4));
    ASSERT_LT(st.cp, 0x110000u);
  }
}

TEST(Utf8, TruncatedOnlyForValidPrefixes) {
  for (uint32_t cp : {0x80u, 0x7FFu, 0x800u, 0xFFFDu, 0x10000u, 0x10FFFFu}) {
    std::string s;
    append_utf8(cp, &s);
    for (size_t cut = 1; cut < s.size(); ++cut) {
      Utf8Step st = read(s.substr(0, cut));
      EXPECT_EQ(st.status, Utf8Step::kTruncated) << cp << " cut " << cut;
      EXPECT_EQ(st.len, cut);
      // The same prefix followed by ASCII is ill-formed, and the prefix is the maximal subpart.
      Utf8Step bad = read(s.substr(0, cut) + "A");
      EXPECT_EQ(bad.status, Utf8Step::kInvalid);
      EXPECT_EQ(bad.len, cut);
    }
  }
}

TEST(Utf8, LossyDecodingKeepsValidTextAndOutputsValidUtf8) {
  std::mt19937 rng(11);
  for (int i = 0; i < 20000; ++i) {
    std::string s(rng() % 16, '\0');
    for (char& c : s) c = static_cast<char>(rng() % 4 == 0 ? 0x20 + rng() % 0x60 : 0x80 + rng() % 0x80);
    const std::string fixed = to_valid_utf8(s);
    ASSERT_TRUE(is_valid_utf8(fixed));
    if (is_valid_utf8(s)) {
      ASSERT_EQ(fixed, s);
    }
  }
}

}  // namespace
}  // namespace orchid::tokenizer
