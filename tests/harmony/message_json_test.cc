// openai-harmony's message JSON survives a round trip through orchid's data model (every golden
// conversation, as openai-harmony serialised it).
#include "harmony/message_json.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "golden_files.h"

namespace orchid::harmony {
namespace {

TEST(HarmonyMessageJson, RoundTripsOpenAiHarmonyJson) {
  const auto cases = testing::read_golden_jsonl("render_cases.jsonl");
  ASSERT_GE(cases.size(), 1000u);
  for (const auto& c : cases) {
    const Json& original = c.at("conversation");
    const Conversation conv = conversation_from_json(original, c.at("name"));
    // Tool namespaces come back in key order (openai-harmony keeps them in a sorted map too): compare
    // as unordered JSON; the order of schema properties is checked by the rendering tests.
    EXPECT_EQ(nlohmann::json::parse(conversation_to_json(conv).dump()),
              nlohmann::json::parse(original.dump()))
        << c.at("name");
    EXPECT_EQ(conversation_from_json(conversation_to_json(conv), "again"), conv) << c.at("name");
  }
}

TEST(HarmonyMessageJson, NamesTheFieldOfABadMessage) {
  const Json bad =
      Json::parse(R"({"messages": [{"role": "user", "content": "hi"}, {"role": "robot", "content": "x"}]})");
  try {
    conversation_from_json(bad, "request.json");
    FAIL() << "accepted an unknown role";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("request.json.messages[1].role"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace orchid::harmony
