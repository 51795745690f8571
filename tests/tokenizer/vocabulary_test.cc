#include "tokenizer/vocabulary.h"

#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "core/parse.h"
#include "test_data.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/embedded_vocab.h"

namespace orchid::tokenizer {
namespace {

// A tiny .tiktoken text: all 256 bytes plus a few merges.
std::string small_tiktoken(const std::vector<std::string>& extra) {
  static const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  auto b64 = [&](const std::string& in) {
    std::string out;
    uint32_t acc = 0;
    int bits = 0;
    for (unsigned char c : in) {
      acc = (acc << 8) | c, bits += 8;
      while (bits >= 6) out += alphabet[(acc >> (bits - 6)) & 63], bits -= 6;
    }
    if (bits) out += alphabet[(acc << (6 - bits)) & 63];
    while (out.size() % 4) out += '=';
    return out;
  };
  std::string text;
  int rank = 0;
  for (int b = 0; b < 256; ++b)
    text += b64(std::string(1, static_cast<char>(b))) + " " + std::to_string(rank++) + "\n";
  for (const auto& e : extra) text += b64(e) + " " + std::to_string(rank++) + "\n";
  return text;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Vocabulary, TiktokenTextParses) {
  Vocabulary v = parse_tiktoken_ranks(small_tiktoken({"ab", "abc"}), "x.tiktoken");
  ASSERT_EQ(v.rank_count(), 258);
  EXPECT_EQ(v.token(256), "ab");
  EXPECT_EQ(v.token(257), "abc");
  BpeTokenizer tok(std::move(v));
  EXPECT_EQ(tok.encode_ordinary("abc"), (std::vector<int32_t>{257}));
  EXPECT_EQ(tok.encode_ordinary("abd"), (std::vector<int32_t>{256, 'd'}));
}

TEST(Vocabulary, BadTiktokenFilesNameTheFileAndLine) {
  EXPECT_NE(error_of([] { parse_tiktoken_ranks("YQ== 0\n!!!! 1\n", "f.tiktoken"); }).find("f.tiktoken:2"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_tiktoken_ranks("YQ== x\n", "f.tiktoken"); }).find("rank"), std::string::npos);
  EXPECT_NE(error_of([] { parse_tiktoken_ranks("YQ==\n", "f.tiktoken"); }).find("f.tiktoken:1"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_tiktoken_ranks("YQ== 0\nYg== 2\n", "f.tiktoken"); }).find("missing"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_tiktoken_ranks("", "f.tiktoken"); }).find("no ranks"), std::string::npos);
  // Well-formed but unusable: a byte without a token, or the same bytes twice.
  EXPECT_NE(
      error_of([] { BpeTokenizer t(parse_tiktoken_ranks("YQ== 0\n", "f.tiktoken")); }).find("single byte"),
      std::string::npos);
  EXPECT_NE(error_of([] {
              BpeTokenizer t(parse_tiktoken_ranks(small_tiktoken({"ab", "ab"}), "f.tiktoken"));
            }).find("repeats"),
            std::string::npos);
}

TEST(Vocabulary, BadTokenizerJsonIsAUserError) {
  EXPECT_NE(error_of([] { parse_hf_tokenizer_json("{", "t.json"); }).find("t.json"), std::string::npos);
  EXPECT_NE(error_of([] { parse_hf_tokenizer_json("{}", "t.json"); }).find("model"), std::string::npos);
  EXPECT_NE(error_of([] {
              parse_hf_tokenizer_json(R"({"model":{"type":"BPE","vocab":{}},"pre_tokenizer":null})",
                                      "t.json");
            }).find("pre_tokenizer"),
            std::string::npos);
  EXPECT_NE(
      error_of([] { parse_hf_tokenizer_json(R"({"model":{"type":"Unigram"}})", "t.json"); }).find("BPE"),
      std::string::npos);
  // The published file with one added token moved to an absurd id.
  std::string doc = read_text_file(testing::fixture_dir() + "/tokenizer.json", "fixture");
  const std::string_view id = "\"id\": 199998";
  const size_t at = doc.find(id);
  ASSERT_NE(at, std::string::npos);
  doc.replace(at, id.size(), "\"id\": 2000000000");
  EXPECT_NE(error_of([&] { parse_hf_tokenizer_json(doc, "t.json"); }).find("expected one above"),
            std::string::npos);
}

TEST(Vocabulary, HarmonySpecialsFillOnlyFreeIdsAndNames) {
  Vocabulary v = parse_tiktoken_ranks(small_tiktoken({}), "x");
  v.specials.push_back({200006, "<|begin|>"});  // a file's own name for an id wins
  add_harmony_specials(&v);
  BpeTokenizer tok(std::move(v));
  EXPECT_EQ(tok.vocab_size(), kHarmonyVocabSize);
  EXPECT_EQ(tok.special_id("<|begin|>"), 200006);
  EXPECT_FALSE(tok.special_id("<|start|>").has_value());
  EXPECT_EQ(tok.special_id("<|end|>"), 200007);
  EXPECT_FALSE(tok.is_special(300)) << "ids between the ranks and the specials are unknown";
}

TEST(Vocabulary, EmbeddedCopyIsTheFixtureFile) {
  const std::string dir = testing::fixture_dir();
  ASSERT_FALSE(dir.empty()) << "gpt-oss tokenizer fixtures not found beside the repository";
  EXPECT_EQ(embedded_o200k_base(), read_text_file(dir + "/o200k_base.tiktoken", "fixture"));
  EXPECT_EQ(parse_tiktoken_ranks(embedded_o200k_base(), "built-in").rank_count(), kHarmonyFirstSpecialId);
}

}  // namespace
}  // namespace orchid::tokenizer
