#include "engine/stop_checker.h"

#include <gtest/gtest.h>

#include <random>

#include "test_util.h"

namespace orchid::engine {
namespace {

using test::toy_text;
using test::ToyDecoder;

struct Fed {
  std::string text;  // everything shown
  StopOutcome last;
  int32_t used = 0;  // tokens consumed
};

Fed feed(StopConfig config, const std::vector<int32_t>& ids, bool decoder = true) {
  StopChecker c(std::move(config), decoder ? std::make_unique<ToyDecoder>() : nullptr);
  Fed r;
  for (int32_t id : ids) {
    ++r.used;
    r.last = c.on_token(id, r.used, false);
    r.text += r.last.text;
    if (r.last.finish != FinishReason::kNone) return r;
  }
  r.text += c.release_text();
  return r;
}

StopConfig strings(std::vector<std::string> stops, int32_t max_tokens = 100) {
  StopConfig c;
  c.stop_strings = std::move(stops);
  c.max_tokens = max_tokens;
  return c;
}

// Pieces: 1 "a", 2 "b", 3 "c", 4 "st", 5 "op", 6 "s", 7 "top", 8/9 the two bytes of "é", 10 "xbx".
TEST(StopChecker, MatchSpanningTokensStopsBeforeTheStopString) {
  const Fed r = feed(strings({"stop"}), {1, 4, 5, 2});
  EXPECT_EQ(r.last.finish, FinishReason::kStop);
  EXPECT_EQ(r.last.stop_string, "stop");
  EXPECT_EQ(r.used, 3);
  EXPECT_EQ(r.text, "a");
  const Fed r2 = feed(strings({"stop"}), {6, 7});  // "s" + "top"
  EXPECT_EQ(r2.text, "");
  EXPECT_EQ(r2.used, 2);
}

TEST(StopChecker, NeverShowsTextPastTheStopWithinAToken) {
  const Fed r = feed(strings({"b"}), {1, 10, 3});  // "a", "xbx": stop inside the second token
  EXPECT_EQ(r.text, "ax");
  EXPECT_EQ(r.used, 2);
  StopConfig inc = strings({"b"});
  inc.include_stop_str_in_output = true;
  EXPECT_EQ(feed(inc, {1, 10, 3}).text, "axb");
}

TEST(StopChecker, HeldBackTextIsReleasedWhenTheMatchFails) {
  StopChecker c(strings({"stop"}), std::make_unique<ToyDecoder>());
  EXPECT_EQ(c.on_token(4, 1, false).text, "");  // "st" could begin "stop"
  EXPECT_EQ(c.on_token(1, 2, false).text, "sta");
  EXPECT_EQ(c.on_token(6, 3, false).text, "");    // "s"
  const StopOutcome o = c.on_token(6, 4, false);  // "ss": the first s is safe now
  EXPECT_EQ(o.text, "s");
  EXPECT_EQ(c.release_text(), "s");
}

TEST(StopChecker, EarliestOfSeveralStopStringsWins) {
  const Fed r = feed(strings({"op", "sto"}), {1, 4, 5});  // "a" "st" "op": "sto" starts first
  EXPECT_EQ(r.last.stop_string, "sto");
  EXPECT_EQ(r.text, "a");
}

TEST(StopChecker, Utf8CharactersAreShownWhole) {
  StopChecker c(strings({}), std::make_unique<ToyDecoder>());
  EXPECT_EQ(c.on_token(8, 1, false).text, "");
  EXPECT_EQ(c.on_token(9, 2, false).text, "\xC3\xA9");
}

TEST(StopChecker, StopIdsRespectMinTokens) {
  StopConfig c;
  c.stop_ids = {0, 7};
  c.max_tokens = 10;
  c.min_tokens = 2;
  StopChecker s(c, std::make_unique<ToyDecoder>());
  EXPECT_TRUE(s.bans_stop_ids(0));
  EXPECT_TRUE(s.bans_stop_ids(1));
  EXPECT_FALSE(s.bans_stop_ids(2));
  std::string text;
  StopOutcome o = s.on_token(7, 1, false);  // before min_tokens: an ordinary token
  EXPECT_EQ(o.finish, FinishReason::kNone);
  text += o.text;
  o = s.on_token(1, 2, false);
  EXPECT_EQ(o.finish, FinishReason::kNone);
  text += o.text;
  o = s.on_token(0, 3, false);
  EXPECT_EQ(o.finish, FinishReason::kStop);
  EXPECT_EQ(o.stop_token, 0);
  text += o.text;
  EXPECT_EQ(text, "topa");  // the stop token's own text is not shown
}

TEST(StopChecker, LengthAndContextLimits) {
  StopConfig c = strings({"zz"}, 3);
  const Fed r = feed(c, {1, 2, 3, 1});
  EXPECT_EQ(r.last.finish, FinishReason::kLength);
  EXPECT_EQ(r.used, 3);
  EXPECT_EQ(r.text, "abc");
  StopChecker s(strings({}, 100), nullptr);
  EXPECT_EQ(s.on_token(1, 1, true).finish, FinishReason::kLength);
  // A cut UTF-8 character is flushed as the decoder renders it.
  StopChecker u(strings({}, 1), std::make_unique<ToyDecoder>());
  EXPECT_EQ(u.on_token(8, 1, false).text, "\xEF\xBF\xBD");
}

// Random token streams: the text shown is the full decoded text cut at the first occurrence of any stop
// string, and the stream ends on the token that completes it.
TEST(StopChecker, RandomStreamsMatchTheOracle) {
  std::mt19937 rng(7);
  const std::vector<std::vector<std::string>> stop_sets = {
      {"stop"}, {"bb", "cab"}, {"xb"}, {"\xC3\xA9"}, {"tops", "a "}};
  int stopped = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::vector<int32_t> ids(1 + rng() % 30);
    for (auto& id : ids) id = 1 + int32_t(rng() % 11);
    const auto& stops = stop_sets[size_t(trial) % stop_sets.size()];
    const Fed r = feed(strings(stops), ids);
    // Oracle: the shortest prefix of ids whose text contains a stop string.
    std::string want;
    int32_t want_used = int32_t(ids.size());
    for (size_t n = 1; n <= ids.size(); ++n) {
      const std::string text = toy_text({ids.begin(), ids.begin() + std::ptrdiff_t(n)});
      size_t first = std::string::npos;
      for (const auto& s : stops) first = std::min(first, text.find(s));
      if (first != std::string::npos) {
        want = text.substr(0, first);
        want_used = int32_t(n);
        break;
      }
      want = text;
    }
    if (r.last.finish == FinishReason::kStop) ++stopped;
    ASSERT_EQ(r.text, want) << "trial " << trial;
    ASSERT_EQ(r.used, want_used) << "trial " << trial;
  }
  EXPECT_GT(stopped, 500);
}

}  // namespace
}  // namespace orchid::engine
