// The matcher against the obvious oracle: the whole text cut at the earliest occurrence of any stop string,
// over random texts split at random points (UTF-8 included).
#include "server/stop_strings.h"

#include <gtest/gtest.h>

#include <random>

namespace orchid::server {
namespace {

std::string oracle(const std::string& text, const std::vector<std::string>& stops, bool* matched) {
  size_t best = std::string::npos;
  for (const auto& s : stops) best = std::min(best, text.find(s));
  *matched = best != std::string::npos;
  return text.substr(0, best);
}

TEST(StopStringMatcher, AgreesWithTheWholeTextOracle) {
  std::mt19937 rng(7);
  const std::vector<std::string> alphabet = {"a", "b", "c", "é", "💖", " "};
  for (int iter = 0; iter < 3000; ++iter) {
    std::vector<std::string> stops;
    for (int k = 1 + int(rng() % 3); k > 0; --k) {
      std::string s;
      for (int n = 1 + int(rng() % 4); n > 0; --n) s += alphabet[rng() % alphabet.size()];
      stops.push_back(s);
    }
    std::string text;
    for (int n = int(rng() % 40); n > 0; --n) text += alphabet[rng() % alphabet.size()];
    StopStringMatcher m(stops);
    std::string shown;
    size_t pos = 0;
    while (pos < text.size()) {
      const size_t len = std::min(text.size() - pos, size_t(1 + rng() % 6));
      const std::string piece = m.push(text.substr(pos, len));
      shown += piece;
      pos += len;
      if (m.matched()) {
        EXPECT_TRUE(m.push("more").empty());
      }
    }
    shown += m.flush();
    bool matched = false;
    EXPECT_EQ(shown, oracle(text, stops, &matched)) << text;
    EXPECT_EQ(m.matched(), matched);
  }
}

TEST(StopStringMatcher, HoldsBackOnlyPossibleStarts) {
  StopStringMatcher m({"STOP"});
  EXPECT_EQ(m.push("abc ST"), "abc ");
  EXPECT_EQ(m.push("x"), "STx");
  EXPECT_EQ(m.push("S"), "");
  EXPECT_EQ(m.push("TOP tail"), "");
  EXPECT_TRUE(m.matched());
  StopStringMatcher none;
  EXPECT_EQ(none.push("anything"), "anything");
  EXPECT_FALSE(none.active());
}

}  // namespace
}  // namespace orchid::server
