// The Responses event sequence against the messages the Harmony parser finds in the same output: items are
// announced empty and in progress, a client that appends the deltas to the announced item (as the openai
// SDK's responses.stream() does) holds at every event a prefix of the finished item and at its .done event
// the finished item itself, sequence numbers count up from 0, and the sequence does not depend on how the
// engine batched the tokens.
#include "server/responses_output.h"

#include <gtest/gtest.h>

#include "harmony/stream_parser.h"

namespace orchid::server {
namespace {

struct Event {
  std::string type;
  Json data;
};

std::vector<Event> parse_sse(const std::string& sse) {
  std::vector<Event> out;
  size_t pos = 0;
  while (pos < sse.size()) {
    const size_t end = sse.find("\n\n", pos);
    EXPECT_NE(end, std::string::npos) << sse.substr(pos);
    if (end == std::string::npos) break;
    const std::string block = sse.substr(pos, end - pos);
    const size_t nl = block.find('\n');
    EXPECT_TRUE(block.starts_with("event: ") && nl != std::string::npos) << block;
    EXPECT_TRUE(block.compare(nl + 1, 6, "data: ") == 0) << block;
    out.push_back({block.substr(7, nl - 7), Json::parse(block.substr(nl + 7))});
    pos = end + 2;
  }
  return out;
}

// The text a client shows for an item: a message's or reasoning's first content part, a call's arguments.
std::string item_text(const Json& item) {
  if (item["type"] == "function_call") return item["arguments"];
  if (item["content"].empty()) return "";
  return item["content"][0]["text"];
}

class ResponsesOutputTest : public ::testing::Test {
 protected:
  void SetUp() override { tok = tokenizer::Tokenizer::builtin(); }
  std::vector<int32_t> ids(const std::string& s) const { return tok->encode(s, tok->special_literals()); }

  struct Run {
    std::vector<Event> events;
    Json output;
  };
  // Feeds `tokens` in batches of `batch` (0: all at once), then the end of the output.
  Run run(const std::vector<int32_t>& tokens, size_t batch, bool cut = false,
          const std::vector<int32_t>& prefix = {}) {
    int counter = 0;
    ResponsesOutput out(tok, prefix,
                        [&](std::string_view p) { return std::string(p) + std::to_string(counter++); });
    std::string sse;
    const size_t step = batch ? batch : tokens.size();
    for (size_t i = 0; i < tokens.size(); i += step)
      out.push(std::span(tokens).subspan(i, std::min(step, tokens.size() - i)), &sse);
    out.finish(cut, &sse);
    return {parse_sse(sse), out.output_json()};
  }

  // Replays the events as a client accumulates them and checks each against the finished output.
  void check_snapshots(const Run& r) {
    std::vector<Json> snapshot;
    int64_t seq = 0;
    for (const Event& e : r.events) {
      EXPECT_EQ(e.data["type"], e.type);
      EXPECT_EQ(e.data["sequence_number"], seq++);
      const size_t index = e.data["output_index"];
      if (e.type == "response.output_item.added") {
        EXPECT_EQ(index, snapshot.size());
        const Json& item = e.data["item"];
        EXPECT_EQ(item["status"], "in_progress");
        EXPECT_EQ(item_text(item), "") << item;
        EXPECT_TRUE(item.value("summary", Json::array()).empty());
        snapshot.push_back(item);
        continue;
      }
      ASSERT_LT(index, snapshot.size()) << e.type;
      Json& item = snapshot[index];
      EXPECT_EQ(e.data.value("item_id", std::string(item["id"])), item["id"]);
      const Json& final_item = r.output[index];
      if (e.type == "response.content_part.added") {
        EXPECT_EQ(e.data["content_index"], item["content"].size());
        item["content"].push_back(e.data["part"]);
      } else if (e.type == "response.output_text.delta" || e.type == "response.reasoning_text.delta") {
        EXPECT_EQ(e.data["content_index"], 0);
        item["content"][0]["text"] = item_text(item) + std::string(e.data["delta"]);
      } else if (e.type == "response.function_call_arguments.delta") {
        item["arguments"] = item_text(item) + std::string(e.data["delta"]);
      } else if (e.type == "response.output_text.done" || e.type == "response.reasoning_text.done") {
        EXPECT_EQ(e.data["text"], item_text(item));
      } else if (e.type == "response.function_call_arguments.done") {
        EXPECT_EQ(e.data["arguments"], item_text(item));
        EXPECT_EQ(e.data["name"], item["name"]);
      } else if (e.type == "response.output_item.done") {
        EXPECT_EQ(e.data["item"], final_item);
        EXPECT_EQ(item_text(item), item_text(final_item));
        item = e.data["item"];
      }
      EXPECT_TRUE(item_text(final_item).starts_with(item_text(item))) << e.type;
    }
    ASSERT_EQ(snapshot.size(), r.output.size());
    for (size_t i = 0; i < snapshot.size(); ++i) EXPECT_EQ(snapshot[i], r.output[i]);
  }

  std::shared_ptr<const tokenizer::Tokenizer> tok;
};

const char* kReasoningAndCall =
    "<|channel|>analysis<|message|>The user wants the weather. I should call get_weather.<|end|>"
    "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
    "{\"city\":\"Rome\"}<|call|>";
const char* kReasoningAndAnswer =
    "<|channel|>analysis<|message|>Simple greeting.<|end|><|start|>assistant<|channel|>final<|message|>"
    "Hello there, caf\xc3\xa9 \xf0\x9f\x92\x96!<|return|>";

TEST_F(ResponsesOutputTest, ItemsAreAnnouncedEmptyHoweverTheTokensAreBatched) {
  for (const char* text : {kReasoningAndCall, kReasoningAndAnswer}) {
    const std::vector<int32_t> tokens = ids(text);
    const harmony::ParseResult parsed =
        harmony::parse_completion(tok, tokens, harmony::Role::kAssistant, /*strict=*/true);
    const Run whole = run(tokens, 0);
    ASSERT_EQ(whole.output.size(), parsed.messages.size()) << text;
    for (size_t i = 0; i < parsed.messages.size(); ++i) {
      EXPECT_EQ(item_text(whole.output[i]), parsed.messages[i].text_content());
      EXPECT_EQ(whole.output[i]["status"], "completed");
    }
    check_snapshots(whole);
    for (size_t batch : {1, 2, 5}) {
      const Run r = run(tokens, batch);
      ASSERT_EQ(r.events.size(), whole.events.size()) << "batch " << batch;
      for (size_t i = 0; i < r.events.size(); ++i) EXPECT_EQ(r.events[i].data, whole.events[i].data);
    }
  }
}

TEST_F(ResponsesOutputTest, ForcedCallStreamsItsArguments) {
  const std::vector<int32_t> prefix =
      ids("<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>");
  const Run r = run(ids("{\"city\":\"Rome\"}<|call|>"), 0, false, prefix);
  ASSERT_EQ(r.output.size(), 1u);
  EXPECT_EQ(r.output[0]["type"], "function_call");
  EXPECT_EQ(r.output[0]["name"], "get_weather");
  EXPECT_EQ(r.output[0]["arguments"], "{\"city\":\"Rome\"}");
  check_snapshots(r);
}

TEST_F(ResponsesOutputTest, ItemCutByMaxTokensIsIncomplete) {
  const std::vector<int32_t> all = ids(kReasoningAndAnswer);
  // Cut inside the final answer: the reasoning is complete, the answer incomplete.
  const std::vector<int32_t> cut(all.begin(), all.end() - 3);
  const Run r = run(cut, 1, /*cut=*/true);
  ASSERT_EQ(r.output.size(), 2u);
  EXPECT_EQ(r.output[0]["status"], "completed");
  EXPECT_EQ(r.output[1]["status"], "incomplete");
  const harmony::ParseResult parsed = harmony::parse_completion(tok, cut, harmony::Role::kAssistant, false);
  ASSERT_EQ(parsed.messages.size(), 2u);
  EXPECT_EQ(item_text(r.output[1]), parsed.messages[1].text_content());
  check_snapshots(r);
}

}  // namespace
}  // namespace orchid::server
