// orchid's Harmony renderer and streaming parser against openai-harmony 0.0.8, on the golden cases made by
// tools/golden/harmony_cases.py (its published test scenarios plus seeded random conversations and
// model-like completions, malformed and truncated ones included).
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "golden_files.h"
#include "harmony/message_json.h"
#include "harmony/render.h"
#include "harmony/stream_parser.h"
#include "tokenizer/tokenizer.h"

namespace orchid::harmony {
namespace {

using Json = nlohmann::ordered_json;

using testing::read_golden_jsonl;

const std::vector<Json>& render_cases() {
  static const std::vector<Json> cases = read_golden_jsonl("render_cases.jsonl");
  return cases;
}

const std::vector<Json>& parse_cases() {
  static const std::vector<Json> cases = read_golden_jsonl("parse_cases.jsonl");
  return cases;
}

std::vector<int32_t> ids_of(const Json& j) {
  std::vector<int32_t> ids;
  // Ids above INT32_MAX (openai-harmony takes u32) wrap to negative values: unknown ids either way.
  for (const Json& v : j) ids.push_back(static_cast<int32_t>(static_cast<uint32_t>(v.get<int64_t>())));
  return ids;
}

Pieces render_case(const Json& c) {
  const Conversation conv = conversation_from_json(c.at("conversation"), c.at("name").get<std::string>());
  const RenderConfig cfg{c.at("auto_drop").get<bool>()};
  const std::string op = c.at("op");
  if (op == "completion")
    return render_for_completion(conv, *role_from_name(c.at("next_role").get<std::string>()), cfg);
  if (op == "conversation") return render_conversation(conv, cfg);
  if (op == "training") return render_for_training(conv, cfg);
  return render_message(conv.messages.at(0), RenderOptions{c.at("function_tools").get<bool>()});
}

TEST(HarmonyGolden, RendersLikeOpenAiHarmony) {
  auto tok = tokenizer::Tokenizer::builtin();
  ASSERT_GE(render_cases().size(), 1000u);
  int checked = 0, rejected = 0, failures = 0;
  for (const Json& c : render_cases()) {
    const std::string name = c.at("name");
    if (c.contains("error")) {
      EXPECT_THROW(render_case(c), Error) << name << ": openai-harmony rejects it: " << c.at("error");
      ++rejected;
      continue;
    }
    const std::vector<int32_t> expected = ids_of(c.at("ids"));
    const Pieces pieces = render_case(c);
    const std::string want = tok->decode(expected);
    const std::string got = pieces_text(pieces);
    if (got != want && ++failures <= 5)
      ADD_FAILURE() << name << "\n--- expected\n" << want << "\n--- got\n" << got;
    const std::vector<int32_t> ids = pieces_ids(pieces, *tok);
    if (ids != expected && ++failures <= 5)
      ADD_FAILURE() << name << ": ids differ (text equal: " << (got == want) << ")";
    ++checked;
  }
  EXPECT_EQ(failures, 0);
  EXPECT_GE(rejected, 5);
  std::printf("render cases: %d equal in text and ids, %d rejected as by openai-harmony\n", checked,
              rejected);
}

Json optional_json(const std::optional<std::string>& s) {
  return s ? Json(*s) : Json(nullptr);
}

// [state, delta, role, author name, channel, recipient, content type], as the golden file writes steps.
Json snapshot(const StreamParser& p) {
  const char* state = p.state() == StreamState::kExpectStart ? "E"
                      : p.state() == StreamState::kHeader    ? "H"
                                                             : "C";
  auto role = p.current_role();
  return Json::array({state, optional_json(p.last_content_delta()),
                      role ? Json(std::string(role_name(*role))) : Json(nullptr),
                      optional_json(p.current_author_name()), optional_json(p.current_channel()),
                      optional_json(p.current_recipient()), optional_json(p.current_content_type())});
}

std::vector<Json> expected_steps(const Json& r) {
  std::vector<Json> steps;
  const Json& deltas = r.at("deltas");
  const Json& spans = r.at("spans");
  size_t span = 0;
  for (size_t i = 0; i < deltas.size(); ++i) {
    while (span + 1 < spans.size() && spans[span + 1][0].get<size_t>() <= i) ++span;
    const Json& s = spans[span];
    steps.push_back(Json::array({s[1], deltas[i], s[2], s[3], s[4], s[5], s[6]}));
  }
  return steps;
}

Json message_row(const Message& m) {
  return Json::array({std::string(role_name(m.author.role)), optional_json(m.author.name),
                      optional_json(m.channel), optional_json(m.recipient), optional_json(m.content_type),
                      m.text_content()});
}

// Runs one case in one mode; returns a description of the first difference, or "".
std::string run_parse_case(const Json& c, bool strict) {
  const Json& want = c.at(strict ? "strict" : "lenient");
  const std::vector<int32_t> ids = ids_of(c.at("ids"));
  std::optional<Role> role;
  if (!c.at("role").is_null()) role = role_from_name(c.at("role").get<std::string>());
  const std::vector<Json> steps = expected_steps(want);
  const size_t error_at =
      strict && !want.at("error").is_null() ? want.at("error").at("at").get<size_t>() : SIZE_MAX;

  StreamParser parser(tokenizer::Tokenizer::builtin(), role, strict);
  auto messages_match = [&]() -> std::string {
    Json got = Json::array();
    for (const Message& m : parser.messages()) got.push_back(message_row(m));
    return got == want.at("messages")
               ? ""
               : "messages: expected " + want.at("messages").dump() + " got " + got.dump();
  };
  for (size_t i = 0; i < ids.size(); ++i) {
    try {
      parser.process(ids[i]);
    } catch (const Error& e) {
      if (i == error_at) return messages_match();
      return "token " + std::to_string(i) + ": unexpected error: " + e.what();
    }
    if (i == error_at) return "token " + std::to_string(i) + ": openai-harmony raises here, orchid did not";
    const Json got = snapshot(parser);
    if (got != steps.at(i))
      return "token " + std::to_string(i) + ": expected " + steps[i].dump() + " got " + got.dump();
  }
  if (parser.current_content() != want.at("content").get<std::string>()) return "current_content differs";
  try {
    parser.process_eos();
  } catch (const Error& e) {
    if (error_at == ids.size()) return messages_match();
    return std::string("end of output: unexpected error: ") + e.what();
  }
  if (error_at == ids.size()) return "end of output: openai-harmony raises here, orchid did not";
  if (snapshot(parser) != want.at("eos_step")) return "after end of output: " + snapshot(parser).dump();
  if (!strict) {
    std::set<size_t> got, expected;
    for (const Recovery& r : parser.recoveries()) got.insert(r.token_index);
    for (const Json& k : want.at("recovered")) expected.insert(k.get<size_t>());
    if (got != expected) return "recoveries at other tokens than expected";
  } else if (!parser.recoveries().empty()) {
    return "strict mode recorded recoveries";
  }
  return messages_match();
}

void check_parse_mode(bool strict) {
  ASSERT_GE(parse_cases().size(), 1000u);
  int failures = 0, raising = 0;
  for (const Json& c : parse_cases()) {
    const std::string diff = run_parse_case(c, strict);
    if (!diff.empty() && ++failures <= 8) ADD_FAILURE() << c.at("name").get<std::string>() << ": " << diff;
    if (strict && !c.at("strict").at("error").is_null()) ++raising;
    if (!strict && !c.at("lenient").at("recovered").empty()) ++raising;
  }
  EXPECT_EQ(failures, 0);
  EXPECT_GE(raising, 100) << "the golden cases should exercise malformed output";
  std::printf("%s: %zu cases, %d %s\n", strict ? "strict" : "lenient", parse_cases().size(), raising,
              strict ? "raise where openai-harmony raises" : "recovered");
}

TEST(HarmonyGolden, StrictParserMatchesOpenAiHarmony) {
  check_parse_mode(true);
}
TEST(HarmonyGolden, LenientParserMatchesOpenAiHarmonyAndRecovers) {
  check_parse_mode(false);
}

TEST(HarmonyGolden, BuiltinToolsMatchOpenAiHarmony) {
  std::ifstream f(std::string(ORCHID_HARMONY_GOLDEN_DIR) + "/builtin_tools.json");
  const Json j = Json::parse(f);
  ToolsMap expected = tools_from_json(j, "builtin_tools.json");
  EXPECT_EQ(expected.at("browser"), browser_tool_namespace());
  EXPECT_EQ(expected.at("python"), python_tool_namespace());
}

}  // namespace
}  // namespace orchid::harmony
