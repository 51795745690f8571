#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <random>

#include "core/error.h"
#include "same_tokenizer.h"
#include "test_data.h"
#include "tokenizer/special_tokens.h"

namespace orchid::tokenizer {
namespace {

TEST(Tokenizer, BuiltinHasTheHarmonyVocabulary) {
  auto tok = Tokenizer::builtin();
  EXPECT_EQ(tok->vocab_size(), kHarmonyVocabSize);
  for (const SpecialToken& t : harmony_special_tokens()) {
    EXPECT_EQ(tok->special_id(t.literal), t.id) << t.literal;
    EXPECT_TRUE(tok->is_special(t.id));
    EXPECT_EQ(tok->decode(std::vector<int32_t>{t.id}), t.literal);
  }
  for (const SpecialToken& t : harmony_special_aliases()) EXPECT_EQ(tok->special_id(t.literal), t.id);
  EXPECT_FALSE(tok->is_special(kHarmonyFirstSpecialId - 1));
  EXPECT_EQ(Tokenizer::builtin().get(), tok.get()) << "built once";
  EXPECT_EQ(Tokenizer::for_model("synthetic:tiny").get(), tok.get());
}

TEST(Tokenizer, BothFileFormatsGiveTheBuiltinTokenizer) {
  const std::string dir = testing::fixture_dir();
  ASSERT_FALSE(dir.empty()) << "gpt-oss tokenizer fixtures not found beside the repository";
  auto builtin = Tokenizer::builtin();
  testing::expect_same_tokenizer(*builtin, *Tokenizer::from_tiktoken_file(dir + "/o200k_base.tiktoken"));
  testing::expect_same_tokenizer(*builtin, *Tokenizer::from_hf_json(dir + "/tokenizer.json"));
  testing::expect_same_tokenizer(*builtin, *Tokenizer::for_model(dir));  // a directory with tokenizer.json
}

TEST(Tokenizer, ForModelErrorsNameTheArgument) {
  try {
    Tokenizer::for_model("/no/such/model/dir");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/no/such/model/dir"), std::string::npos);
  }
  EXPECT_THROW(Tokenizer::for_model(ORCHID_SOURCE_DIR "/README.md"), Error);
  EXPECT_EQ(Tokenizer::for_model(ORCHID_SOURCE_DIR "/src").get(), Tokenizer::builtin().get())
      << "no tokenizer.json";
}

TEST(Tokenizer, CorpusRoundTrips) {
  auto tok = Tokenizer::builtin();
  for (const std::string& doc : testing::corpus()) {
    auto ids = tok->encode_ordinary(doc);
    for (int32_t id : ids) ASSERT_FALSE(tok->is_special(id));
    ASSERT_EQ(tok->decode(ids), doc);
  }
}

TEST(Tokenizer, AnyBytesRoundTrip) {
  auto tok = Tokenizer::builtin();
  std::mt19937 rng(1);
  for (int i = 0; i < 3000; ++i) {
    std::string s(rng() % 300, '\0');
    for (char& c : s) c = static_cast<char>(rng() % 3 ? rng() % 128 : rng());
    ASSERT_EQ(tok->decode(tok->encode_ordinary(s)), s);
  }
  // Long pieces take the heap path of the merge; it must agree with the linear one on the same bytes.
  std::string word;
  for (int i = 0; i < 5000; ++i) word += static_cast<char>('a' + rng() % 26);
  auto ids = tok->encode_ordinary(word);
  EXPECT_EQ(tok->decode(ids), word);
}

// encode() is encode_ordinary() of the text between allowed literals, with their ids in between.
TEST(Tokenizer, AllowedSpecialsSplitTheText) {
  auto tok = Tokenizer::builtin();
  const std::vector<std::string> literals = {"<|start|>",           "<|end|>",         "<|message|>",
                                             "<|reserved_200018|>", "<|endofprompt|>", "<|reserved_201087|>"};
  const std::vector<std::string> chunks = {"",    "user", " hello", "<|", "|>", "<|notatoken|>",
                                           "<|<", "x\n",  "'s"};
  std::mt19937 rng(9);
  for (int i = 0; i < 2000; ++i) {
    std::string text;
    std::vector<int32_t> expected;
    std::unordered_set<std::string> allowed;
    for (const auto& l : literals) {
      if (rng() % 2) allowed.insert(l);
    }
    std::string pending;
    for (int k = rng() % 8; k > 0; --k) {
      if (rng() % 3 == 0) {
        const std::string& l = literals[rng() % literals.size()];
        if (allowed.count(l)) {
          auto part = tok->encode_ordinary(pending);
          expected.insert(expected.end(), part.begin(), part.end());
          expected.push_back(*tok->special_id(l));
          pending.clear();
        } else {
          pending += l;
        }
        text += l;
      } else {
        const std::string& c = chunks[rng() % chunks.size()];
        // A chunk that completes an allowed literal with its neighbours would make the expectation wrong.
        if ((c == "<|" || c == "|>" || c == "<|<") && !pending.empty()) continue;
        pending += c;
        text += c;
      }
    }
    auto part = tok->encode_ordinary(pending);
    expected.insert(expected.end(), part.begin(), part.end());
    ASSERT_EQ(tok->encode(text, allowed), expected) << text;
    ASSERT_EQ(tok->encode(text, {}), tok->encode_ordinary(text));
  }
}

TEST(Tokenizer, UnknownIdsAreRejected) {
  auto tok = Tokenizer::builtin();
  std::string out;
  for (int32_t id : {-1, tok->vocab_size(), INT32_MAX}) {
    EXPECT_FALSE(tok->decode_append(id, &out));
    EXPECT_THROW(tok->decode(std::vector<int32_t>{0, id}), Error);
    EXPECT_FALSE(tok->is_special(id));
  }
  EXPECT_TRUE(out.empty());
  EXPECT_FALSE(tok->special_id("<|nope|>").has_value());
}

}  // namespace
}  // namespace orchid::tokenizer
