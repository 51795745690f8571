// HarmonyOutput against the Harmony parser it wraps: for scripted outputs, split into tokens, each item's
// deltas add up to the text of the message parse_completion finds, items open and close in order, and the
// reasoning-token count is the number of tokens from each analysis header to its end token.
#include "server/harmony_output.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "harmony/stream_parser.h"

namespace orchid::server {
namespace {

struct Piece {
  std::string text;
  bool analysis = false;  // part of an analysis message (its header, content and end token)
};

class HarmonyOutputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tok = tokenizer::Tokenizer::builtin();
    specials = tok->special_literals();
  }
  std::vector<int32_t> ids(const std::string& s) const { return tok->encode(s, specials); }

  struct Run {
    HarmonyOutput out;
    std::vector<OutputEvent> events;
  };
  std::unique_ptr<Run> run(const std::vector<int32_t>& tokens, const std::vector<int32_t>& prefix = {}) {
    auto r = std::make_unique<Run>(Run{HarmonyOutput(tok, prefix), {}});
    for (int32_t t : tokens) r->out.push(t, nullptr, &r->events);
    r->out.finish(&r->events);
    return r;
  }
  // Begin, deltas, End per item, in item order; returns the text each item's deltas add up to.
  std::vector<std::string> check_events(const Run& r) {
    std::vector<std::string> text(r.out.items().size());
    std::optional<size_t> open;
    size_t next = 0;
    for (const auto& e : r.events) {
      switch (e.type) {
        case OutputEvent::Type::kBegin:
          EXPECT_FALSE(open.has_value());
          EXPECT_EQ(e.item, next++);
          open = e.item;
          break;
        case OutputEvent::Type::kDelta:
          EXPECT_EQ(open, e.item);
          text[e.item] += e.delta;
          break;
        case OutputEvent::Type::kEnd:
          EXPECT_EQ(open, e.item);
          open.reset();
          break;
      }
    }
    EXPECT_FALSE(open.has_value());
    EXPECT_EQ(next, r.out.items().size());
    return text;
  }

  // The parser's messages less the one the end of the output makes of an unfinished header: the server never
  // shows a header as text.
  std::vector<harmony::Message> shown_messages(const std::vector<int32_t>& tokens) const {
    harmony::StreamParser p(tok, harmony::Role::kAssistant, /*strict=*/false);
    for (int32_t t : tokens) p.process(t);
    const size_t before_end = p.messages().size();
    const bool in_header = p.state() == harmony::StreamState::kHeader;
    p.process_eos();
    std::vector<harmony::Message> shown = p.messages();
    if (in_header) shown.resize(before_end);
    EXPECT_EQ(shown.size() + (in_header && p.messages().size() > before_end),
              harmony::parse_completion(tok, tokens, harmony::Role::kAssistant, false).messages.size());
    return shown;
  }

  std::shared_ptr<const tokenizer::Tokenizer> tok;
  std::unordered_set<std::string> specials;
};

TEST_F(HarmonyOutputTest, ItemsFollowTheParsedMessages) {
  const std::vector<Piece> pieces = {
      {"<|channel|>analysis<|message|>Need the weather; call the tool. 💖<|end|>", true},
      {"<|start|>assistant<|channel|>commentary<|message|>Checking now.<|end|>"},
      {"<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
       "{\"city\":\"Paris\"}<|call|>"},
  };
  std::vector<int32_t> tokens;
  int32_t analysis_tokens = 0;
  for (const auto& p : pieces) {
    const auto t = ids(p.text);
    tokens.insert(tokens.end(), t.begin(), t.end());
    if (p.analysis) analysis_tokens += int32_t(t.size());
  }
  auto r = run(tokens);
  const auto texts = check_events(*r);
  const auto parsed = harmony::parse_completion(tok, tokens, harmony::Role::kAssistant, /*strict=*/true);
  ASSERT_EQ(r->out.items().size(), parsed.messages.size());
  for (size_t i = 0; i < parsed.messages.size(); ++i) {
    const auto& m = parsed.messages[i];
    std::string name;
    EXPECT_EQ(r->out.items()[i].kind, classify(m.channel, m.recipient, &name));
    EXPECT_EQ(r->out.items()[i].name, name);
    EXPECT_EQ(texts[i], m.text_content());
    EXPECT_EQ(r->out.items()[i].text, m.text_content());
    EXPECT_TRUE(r->out.items()[i].done);
  }
  EXPECT_EQ(r->out.items()[2].kind, ItemKind::kFunctionCall);
  EXPECT_EQ(r->out.items()[2].name, "get_weather");
  EXPECT_TRUE(r->out.has_function_calls());
  EXPECT_EQ(r->out.reasoning_tokens(), analysis_tokens);
}

TEST_F(HarmonyOutputTest, CutOffOutputStillAddsUp) {
  // max_tokens may cut anywhere: inside a character, a header, a message.
  const auto tokens =
      ids("<|channel|>analysis<|message|>думаю 💖💖<|end|><|start|>assistant<|channel|>final"
          "<|message|>Ответ: 42 💖");
  for (size_t cut = 0; cut <= tokens.size(); ++cut) {
    const std::vector<int32_t> head(tokens.begin(), tokens.begin() + cut);
    auto r = run(head);
    const auto texts = check_events(*r);
    const auto shown = shown_messages(head);
    ASSERT_EQ(r->out.items().size(), shown.size()) << cut;
    for (size_t i = 0; i < shown.size(); ++i) EXPECT_EQ(texts[i], shown[i].text_content()) << cut;
  }
}

TEST_F(HarmonyOutputTest, RandomTokensNeverBreakIt) {
  std::mt19937 rng(5);
  const std::vector<int32_t> specials_ids = {200005, 200006, 200007, 200008, 200002, 200012, 200003};
  for (int iter = 0; iter < 300; ++iter) {
    std::vector<int32_t> tokens;
    for (int n = int(rng() % 60); n > 0; --n)
      tokens.push_back(rng() % 3 == 0 ? specials_ids[rng() % specials_ids.size()] : int32_t(rng() % 200000));
    auto r = run(tokens);
    const auto texts = check_events(*r);
    const auto shown = shown_messages(tokens);
    ASSERT_EQ(r->out.items().size(), shown.size());
    for (size_t i = 0; i < shown.size(); ++i) EXPECT_EQ(texts[i], shown[i].text_content());
    EXPECT_LE(r->out.reasoning_tokens(), int32_t(tokens.size()));
  }
}

TEST_F(HarmonyOutputTest, OutputEndingInAHeaderShowsNothingOfIt) {
  // tool_choice "required": the prompt ends with the start of a call header, the model continues it.
  const auto prefix = ids("<|channel|>commentary to=functions");
  const auto tokens = ids(".get_weather <|constrain|>json<|message|>{\"city\":\"Rome\"}<|call|>");
  const auto message_at = std::find(tokens.begin(), tokens.end(), *tok->special_id("<|message|>"));
  for (size_t cut = 0; cut < tokens.size(); ++cut) {
    auto r = run(std::vector<int32_t>(tokens.begin(), tokens.begin() + cut), prefix);
    check_events(*r);
    if (tokens.begin() + cut <= message_at) {
      EXPECT_TRUE(r->out.items().empty()) << cut << ": " << r->out.items()[0].text;
    } else {
      ASSERT_EQ(r->out.items().size(), 1u) << cut;
      EXPECT_EQ(r->out.items()[0].kind, ItemKind::kFunctionCall);
      EXPECT_EQ(r->out.items()[0].name, "get_weather");
    }
  }
}

TEST_F(HarmonyOutputTest, ForcedCallHeaderOpensTheCall) {
  const auto prefix = ids("<|channel|>commentary to=functions.lookup <|constrain|>json<|message|>");
  auto r = run(ids("{\"q\":\"x\"}<|call|>"), prefix);
  check_events(*r);
  ASSERT_EQ(r->out.items().size(), 1u);
  EXPECT_EQ(r->out.items()[0].kind, ItemKind::kFunctionCall);
  EXPECT_EQ(r->out.items()[0].name, "lookup");
  EXPECT_EQ(r->out.items()[0].text, "{\"q\":\"x\"}");
}

TEST_F(HarmonyOutputTest, LogprobsGoWithMessageTokensOnly) {
  const auto tokens =
      ids("<|channel|>analysis<|message|>hidden<|end|><|start|>assistant<|channel|>final"
          "<|message|>shown text<|return|>");
  std::vector<runtime::SampledToken> lps(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) lps[i].token = tokens[i];
  HarmonyOutput out(tok);
  std::vector<OutputEvent> events;
  for (size_t i = 0; i < tokens.size(); ++i) out.push(tokens[i], &lps[i], &events);
  out.finish(&events);
  std::string bytes;
  for (const auto& e : events)
    if (e.logprob) tok->decode_append(e.logprob->token, &bytes);
  EXPECT_EQ(bytes, "shown text");
}

}  // namespace
}  // namespace orchid::server
