#include "tokenizer/engine_text_decoder.h"

#include <gtest/gtest.h>

#include <random>

#include "tokenizer/utf8.h"

namespace orchid::tokenizer {
namespace {

TEST(EngineTextDecoder, GivesTheIncrementalDetokenizersDeltas) {
  auto tok = Tokenizer::builtin();
  std::mt19937 rng(5);
  for (int i = 0; i < 500; ++i) {
    EngineTextDecoder decoder(tok);
    IncrementalDetokenizer detok(*tok);
    for (int k = rng() % 16; k > 0; --k) {
      const int32_t id = static_cast<int32_t>(rng() % tok->vocab_size());
      ASSERT_EQ(decoder.append(id), detok.push(id));
    }
    ASSERT_EQ(decoder.flush(), detok.flush());
  }
}

// The engine checks ids against the model's vocabulary, not the tokenizer's; an id unknown to the tokenizer
// must not throw inside the engine's step. Expected: the lossy decoding of the known runs, one U+FFFD per
// unknown id in between.
TEST(EngineTextDecoder, UnknownIdsBecomeReplacementCharacters) {
  auto tok = Tokenizer::builtin();
  const std::string heart = "\xF0\x9F\x92\x96";
  const std::vector<int32_t> split = tok->encode_ordinary(heart);
  ASSERT_GE(split.size(), 2u);
  std::mt19937 rng(6);
  for (int i = 0; i < 500; ++i) {
    std::vector<int32_t> ids;
    std::string expected, run_bytes;
    for (int k = rng() % 12; k > 0; --k) {
      const int choice = rng() % 4;
      if (choice == 0) {
        const int32_t unknown =
            rng() % 2 ? tok->vocab_size() + int32_t(rng() % 1000) : -1 - int32_t(rng() % 5);
        ids.push_back(unknown);
        expected += to_valid_utf8(run_bytes);
        expected += kReplacementChar;
        run_bytes.clear();
        continue;
      }
      const int32_t id = choice == 1 ? split[0] : static_cast<int32_t>(rng() % tok->vocab_size());
      ids.push_back(id);
      ASSERT_TRUE(tok->decode_append(id, &run_bytes));
    }
    expected += to_valid_utf8(run_bytes);
    EngineTextDecoder decoder(tok);
    std::string streamed;
    for (int32_t id : ids) {
      std::string delta;
      ASSERT_NO_THROW(delta = decoder.append(id));
      ASSERT_TRUE(is_valid_utf8(delta));
      streamed += delta;
    }
    streamed += decoder.flush();
    ASSERT_EQ(streamed, expected);
  }
}

}  // namespace
}  // namespace orchid::tokenizer
