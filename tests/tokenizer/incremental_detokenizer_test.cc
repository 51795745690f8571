#include "tokenizer/incremental_detokenizer.h"

#include <gtest/gtest.h>

#include <random>

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace orchid::tokenizer {
namespace {

// Ids whose bytes are not valid UTF-8 on their own (pieces of multi-byte characters) are the interesting
// ones.
std::vector<int32_t> partial_tokens(const Tokenizer& tok) {
  std::vector<int32_t> out;
  for (int32_t id = 0; id < tok.vocab_size(); ++id) {
    std::string b;
    if (tok.decode_append(id, &b) && !is_valid_utf8(b)) out.push_back(id);
  }
  return out;
}

TEST(IncrementalDetokenizer, DeltasAreCompleteUtf8AndAddUpToTheLossyDecoding) {
  auto tok = Tokenizer::builtin();
  const auto partial = partial_tokens(*tok);
  ASSERT_FALSE(partial.empty());
  std::mt19937 rng(13);
  for (int i = 0; i < 5000; ++i) {
    std::vector<int32_t> ids;
    for (int k = rng() % 12; k > 0; --k) {
      ids.push_back(rng() % 2 ? partial[rng() % partial.size()]
                              : static_cast<int32_t>(rng() % tok->vocab_size()));
    }
    IncrementalDetokenizer detok(*tok);
    std::string streamed;
    for (int32_t id : ids) {
      std::string delta = detok.push(id);
      ASSERT_TRUE(is_valid_utf8(delta));
      streamed += delta;
      // Everything emitted so far is the lossy decoding of the bytes so far minus what is held back.
    }
    const bool pending = detok.has_pending();
    const std::string tail = detok.flush();
    EXPECT_EQ(pending, !tail.empty());
    ASSERT_EQ(streamed + tail, to_valid_utf8(tok->decode(ids)));
    EXPECT_FALSE(detok.has_pending());
  }
}

TEST(IncrementalDetokenizer, HoldsBackASplitCharacterUntilItIsComplete) {
  auto tok = Tokenizer::builtin();
  const std::string heart = "\xF0\x9F\x92\x96";  // U+1F496, two tokens in o200k
  auto ids = tok->encode_ordinary(heart);
  ASSERT_GE(ids.size(), 2u);
  IncrementalDetokenizer detok(*tok);
  for (size_t i = 0; i + 1 < ids.size(); ++i) EXPECT_EQ(detok.push(ids[i]), "");
  EXPECT_TRUE(detok.has_pending());
  EXPECT_EQ(detok.push(ids.back()), heart);
  EXPECT_EQ(detok.flush(), "");
  // A dangling partial character is flushed as one U+FFFD.
  EXPECT_EQ(detok.push(ids[0]), "");
  EXPECT_EQ(detok.flush(), kReplacementChar);
}

TEST(IncrementalDetokenizer, UnknownIdThrowsAndKeepsState) {
  auto tok = Tokenizer::builtin();
  auto ids = tok->encode_ordinary("\xF0\x9F\x92\x96");
  IncrementalDetokenizer detok(*tok);
  EXPECT_EQ(detok.push(ids[0]), "");
  EXPECT_THROW(detok.push(tok->vocab_size()), Error);
  EXPECT_THROW(detok.push(-5), Error);
  std::string rest;
  for (size_t i = 1; i < ids.size(); ++i) rest += detok.push(ids[i]);
  EXPECT_EQ(rest, "\xF0\x9F\x92\x96");
}

TEST(Utf8StreamDecoder, ByteByByteEqualsOneShot) {
  std::mt19937 rng(17);
  for (int i = 0; i < 20000; ++i) {
    std::string s(rng() % 12, '\0');
    for (char& c : s) c = static_cast<char>(rng() % 3 ? 0x80 + rng() % 0x80 : rng() % 0x100);
    Utf8StreamDecoder dec;
    std::string out;
    for (char c : s) out += dec.push(std::string_view(&c, 1));
    out += dec.flush();
    ASSERT_EQ(out, to_valid_utf8(s));
  }
}

}  // namespace
}  // namespace orchid::tokenizer
