// The parser's helpers for servers: stop ids, parse_completion, and what a completed message means.
#include "harmony/stream_parser.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "golden_files.h"
#include "harmony/tokens.h"
#include "tokenizer/tokenizer.h"

namespace orchid::harmony {
namespace {

TEST(HarmonyTokens, StructuralIdsAreTheVocabularysSpecialTokens) {
  auto tok = tokenizer::Tokenizer::builtin();
  for (int32_t id : {kReturnId, kConstrainId, kChannelId, kStartId, kEndId, kMessageId, kCallId}) {
    const std::string literal(*structural_literal(id));
    EXPECT_EQ(tok->special_id(literal), id) << literal;
    EXPECT_EQ(tok->decode(std::vector<int32_t>{id}), literal);
  }
  EXPECT_FALSE(structural_literal(200014).has_value());
}

TEST(HarmonyStreamParser, ParseCompletionEqualsFeedingTheParser) {
  const auto cases = testing::read_golden_jsonl("parse_cases.jsonl");
  ASSERT_FALSE(cases.empty());
  for (const auto& c : cases) {
    std::vector<int32_t> ids;
    for (const auto& v : c.at("ids"))
      ids.push_back(static_cast<int32_t>(static_cast<uint32_t>(v.get<int64_t>())));
    std::optional<Role> role;
    if (!c.at("role").is_null()) role = role_from_name(c.at("role").get<std::string>());
    StreamParser parser(tokenizer::Tokenizer::builtin(), role, /*strict=*/false);
    for (int32_t id : ids) parser.process(id);
    parser.process_eos();
    const ParseResult lenient =
        parse_completion(tokenizer::Tokenizer::builtin(), ids, role, /*strict=*/false);
    EXPECT_EQ(lenient.messages, parser.messages()) << c.at("name");
    EXPECT_EQ(lenient.recovered.size(), parser.recoveries().size()) << c.at("name");
    if (c.at("strict").at("error").is_null()) {
      const ParseResult strict =
          parse_completion(tokenizer::Tokenizer::builtin(), ids, role, /*strict=*/true);
      EXPECT_TRUE(strict.recovered.empty());
      EXPECT_EQ(strict.messages.size(), c.at("strict").at("messages").size()) << c.at("name");
    } else {
      EXPECT_THROW(parse_completion(tokenizer::Tokenizer::builtin(), ids, role, /*strict=*/true), Error)
          << c.at("name");
    }
  }
}

Message assistant(const char* channel, std::optional<std::string> recipient = std::nullopt) {
  Message m = Message::text(Role::kAssistant, "x").with_channel(channel);
  m.recipient = std::move(recipient);
  return m;
}

TEST(HarmonyStreamParser, ClassifiesCompletedMessages) {
  EXPECT_EQ(classify_message(assistant("final")), MessageKind::kFinal);
  EXPECT_EQ(classify_message(assistant("analysis")), MessageKind::kReasoning);
  EXPECT_EQ(classify_message(assistant("commentary")), MessageKind::kPreamble);
  EXPECT_EQ(classify_message(assistant("commentary", "functions.get_weather")), MessageKind::kFunctionCall);
  EXPECT_EQ(function_call_name(assistant("commentary", "functions.get_weather")), "get_weather");
  EXPECT_EQ(classify_message(assistant("analysis", "browser.search")), MessageKind::kBuiltinCall);
  EXPECT_EQ(classify_message(assistant("analysis", "python")), MessageKind::kBuiltinCall);
  EXPECT_EQ(function_call_name(assistant("analysis", "python")), std::nullopt);
  EXPECT_EQ(classify_message(assistant("final", "all")), MessageKind::kFinal);
  Message tool_result = Message::text(Author{Role::kTool, "functions.f"}, "{}").with_channel("commentary");
  EXPECT_EQ(classify_message(tool_result.with_recipient("assistant")), MessageKind::kOther);
}

}  // namespace
}  // namespace orchid::harmony
