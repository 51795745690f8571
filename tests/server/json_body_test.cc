#include "server/json_body.h"

#include <gtest/gtest.h>

#include "server/api_error.h"
#include "server/sampling_request.h"

namespace orchid::server {
namespace {

int status_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ApiError& e) {
    return e.status();
  }
  return 0;
}

TEST(JsonBody, RejectsWhatCannotBeParsedSafely) {
  EXPECT_EQ(status_of([] { parse_json_body(""); }), 400);
  EXPECT_EQ(status_of([] { parse_json_body("{\"a\": }"); }), 400);
  EXPECT_EQ(status_of([] { parse_json_body("{\"a\": \"\xff\xfe\"}"); }), 400);  // not UTF-8
  EXPECT_EQ(status_of([] { parse_json_body("{\"a\": 1e999}"); }), 400);         // overflows a double
  const std::string deep = std::string(kMaxJsonDepth + 1, '[') + std::string(kMaxJsonDepth + 1, ']');
  EXPECT_EQ(status_of([&] { parse_json_body(deep); }), 400);
  const std::string ok = std::string(kMaxJsonDepth, '[') + std::string(kMaxJsonDepth, ']');
  EXPECT_EQ(status_of([&] { parse_json_body(ok); }), 0);
  // Brackets inside strings are text, not nesting.
  EXPECT_EQ(status_of([&] { parse_json_body("{\"a\": \"" + std::string(1000, '[') + "\\\"\"}"); }), 0);
}

TEST(JsonBody, KeepsKeyOrder) {
  const Json j = parse_json_body(R"({"z": 1, "a": 2, "m": 3})");
  std::string keys;
  for (auto it = j.begin(); it != j.end(); ++it) keys += it.key();
  EXPECT_EQ(keys, "zam");
}

TEST(JsonFields, TypedAccessNamesTheParameter) {
  const Json j = parse_json_body(R"({"n": 2, "f": 2.0, "big": 1e30, "s": "x", "b": true, "neg": -5,
                                    "huge": 18446744073709551615, "nested": {"k": "v"}})");
  JsonFields f(j, "");
  EXPECT_EQ(f.integer("n", 1, 10), 2);
  EXPECT_EQ(f.integer("f", 1, 10), 2);  // 2.0 is an integer to JavaScript
  EXPECT_EQ(f.string("s"), "x");
  EXPECT_EQ(f.boolean("b"), true);
  EXPECT_EQ(f.integer("missing", 0, 1), std::nullopt);
  try {
    f.integer("big", 0, 100);
    FAIL();
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_EQ(e.param(), "big");
  }
  EXPECT_EQ(status_of([&] { f.integer("neg", 0, 100); }), 400);
  EXPECT_EQ(status_of([&] { f.integer("huge", 0, 100); }), 400);
  EXPECT_EQ(status_of([&] { f.string("n"); }), 400);
  EXPECT_EQ(status_of([&] { f.boolean("s"); }), 400);
  EXPECT_EQ(status_of([&] { f.number("s", 0, 1); }), 400);
  // "nested" was never read.
  try {
    f.reject_unknown();
    FAIL();
  } catch (const ApiError& e) {
    EXPECT_EQ(e.param(), "nested");
    EXPECT_NE(std::string(e.what()).find("Unrecognized request argument supplied: nested"),
              std::string::npos);
  }
  JsonFields inner(j["nested"], "nested");
  EXPECT_EQ(status_of([&] { inner.reject_unknown(); }), 400);
  EXPECT_EQ(status_of([&] { JsonFields(j["s"], "s"); }), 400);
}

TEST(SamplingRequest, ContextLimitsComeWithTheNumbers) {
  EXPECT_EQ(resolve_max_tokens(10, std::nullopt, 100, "prompt"), 90);
  EXPECT_EQ(resolve_max_tokens(10, 90, 100, "prompt"), 90);
  try {
    resolve_max_tokens(10, 91, 100, "messages");
    FAIL();
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_EQ(e.param(), "messages");
    const std::string m = e.what();
    for (const char* n : {"100", "101", "10", "91"}) EXPECT_NE(m.find(n), std::string::npos) << m;
  }
  EXPECT_EQ(status_of([] { resolve_max_tokens(100, std::nullopt, 100, "prompt"); }), 400);
}

TEST(SamplingRequest, RangesAndCombinations) {
  auto read = [](const char* text, ApiKind api) {
    const Json j = parse_json_body(text);
    JsonFields f(j, "");
    auto p = read_generation_params(f, api);
    f.reject_unknown();
    return p;
  };
  auto p = read(R"({"temperature": 0.5, "top_p": 0.9, "seed": -1, "n": 3, "stop": ["a", "b"],
                    "max_completion_tokens": 7, "logprobs": true, "top_logprobs": 2})",
                ApiKind::kChat);
  EXPECT_FLOAT_EQ(p.sampling.temperature, 0.5f);
  EXPECT_EQ(p.seed, uint64_t(-1));
  EXPECT_EQ(p.n, 3);
  EXPECT_EQ(p.stop.size(), 2u);
  EXPECT_EQ(p.max_tokens, 7);
  EXPECT_EQ(p.sampling.num_logprobs, 2);
  EXPECT_EQ(read(R"({})", ApiKind::kCompletions).max_tokens, 16);  // the OpenAI default
  for (const char* bad :
       {R"({"temperature": 3})", R"({"temperature": "hot"})", R"({"top_p": 0})", R"({"n": 0})",
        R"({"n": 1000})", R"({"stop": [1]})", R"({"stop": ""})", R"({"top_logprobs": 2})",
        R"({"max_tokens": 0})", R"({"max_tokens": 1e12})", R"({"stream_options": {"include_usage": true}})",
        R"({"stream": true, "stream_options": {"bogus": 1}})", R"({"frequency_penalty": -3})",
        R"({"min_tokens": 9, "max_tokens": 3})"})
    EXPECT_EQ(status_of([&] { read(bad, ApiKind::kChat); }), 400) << bad;
  EXPECT_EQ(status_of([&] { read(R"({"max_output_tokens": 5, "n": 2})", ApiKind::kResponses); }), 400);
}

}  // namespace
}  // namespace orchid::server
