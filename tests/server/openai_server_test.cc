// The router and the engine wiring in one process, with the scripted backend: phases (503 while loading),
// API keys, the admission limit (429), unknown routes and models, and the promise that a client who leaves
// frees its KV pages within an engine step.
#include "server/openai_server.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <thread>

#include "engine/engine.h"
#include "http_test_client.h"
#include "server/testing/replay_backend.h"

namespace orchid::server {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using test::http_request;
using test::TestConnection;

struct Server {
  explicit Server(ServerOptions so = {}, int32_t step_delay_ms = 0, int32_t max_num_seqs = 8) {
    tok = tokenizer::Tokenizer::builtin();
    so.served_model_name = "test-model";
    so.max_num_seqs = max_num_seqs;
    ctx = std::make_unique<ServerContext>(so, tok);
    HttpServerOptions h;
    h.port = 0;
    http = std::make_unique<OpenAIServer>(*ctx, h);
    http->start();
    port = http->port();
    testing::ReplayOptions o;
    // A long answer, so streams are still running when the test acts on them.
    std::string text;
    for (int i = 0; i < 400; ++i) text += " word";
    o.rules.push_back({"", tok->encode(text + "<|return|>", tok->special_literals())});
    o.step_delay_ms = step_delay_ms;
    backend = std::make_shared<testing::ReplayBackend>(o, tok);
    engine::EngineConfig c;
    c.max_num_seqs = max_num_seqs;
    c.max_num_batched_tokens = 512;
    engine = std::make_shared<engine::Engine>(backend, c);
  }
  void ready() {
    engine->start();
    ctx->set_engine(engine);
  }
  ~Server() {
    http->stop();
    engine->stop();
  }

  std::shared_ptr<const tokenizer::Tokenizer> tok;
  std::unique_ptr<ServerContext> ctx;
  std::unique_ptr<OpenAIServer> http;
  std::shared_ptr<testing::ReplayBackend> backend;
  std::shared_ptr<engine::Engine> engine;
  int port = 0;
};

json error_of(const test::RawResponse& r) {
  const json j = json::parse(r.body);
  EXPECT_TRUE(j.contains("error") && j["error"].contains("message") && j["error"].contains("type")) << r.body;
  return j["error"];
}

TEST(OpenAIServer, LoadingThenReady) {
  Server s;
  auto health = http_request(s.port, "GET", "/health");
  EXPECT_EQ(health.status, 503);
  auto r = http_request(s.port, "POST", "/v1/completions", R"({"prompt": "hi", "max_tokens": 2})");
  EXPECT_EQ(r.status, 503);
  error_of(r);
  s.ready();
  EXPECT_EQ(http_request(s.port, "GET", "/health").status, 200);
  r = http_request(s.port, "POST", "/v1/completions", R"({"prompt": "hi", "max_tokens": 2})");
  EXPECT_EQ(r.status, 200) << r.body;
  const json j = json::parse(r.body);
  EXPECT_EQ(j["usage"]["completion_tokens"], 2);
  EXPECT_EQ(j["model"], "test-model");
}

TEST(OpenAIServer, ApiKeyRoutesAndModels) {
  ServerOptions so;
  so.api_key = "sekrit-key";
  Server s(so);
  s.ready();
  EXPECT_EQ(http_request(s.port, "GET", "/v1/models").status, 401);
  EXPECT_EQ(http_request(s.port, "GET", "/v1/models", "", "Authorization: Bearer sekrit-kez\r\n").status,
            401);
  EXPECT_EQ(http_request(s.port, "GET", "/v1/models", "", "Authorization: Bearer sekrit-key-\r\n").status,
            401);
  auto ok = http_request(s.port, "GET", "/v1/models", "", "Authorization: Bearer sekrit-key\r\n");
  ASSERT_EQ(ok.status, 200);
  EXPECT_EQ(json::parse(ok.body)["data"][0]["id"], "test-model");
  EXPECT_EQ(http_request(s.port, "GET", "/health").status, 200);  // no key needed
  EXPECT_EQ(http_request(s.port, "GET", "/metrics").status, 200);
  const std::string auth = "Authorization: Bearer sekrit-key\r\n";
  EXPECT_EQ(http_request(s.port, "GET", "/v1/nope", "", auth).status, 404);
  EXPECT_EQ(http_request(s.port, "GET", "/v1/completions", "", auth).status, 405);
  auto r = http_request(s.port, "POST", "/v1/completions", R"({"model": "other", "prompt": "x"})", auth);
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(error_of(r)["code"], "model_not_found");
}

TEST(OpenAIServer, ConstantTimeEqual) {
  EXPECT_TRUE(constant_time_equal("abc", "abc"));
  EXPECT_FALSE(constant_time_equal("abd", "abc"));
  EXPECT_FALSE(constant_time_equal("ab", "abc"));
  EXPECT_FALSE(constant_time_equal("abcabc", "abc"));
  EXPECT_FALSE(constant_time_equal("", "abc"));
}

TEST(OpenAIServer, FullQueueGets429) {
  ServerOptions so;
  so.max_waiting_requests = 0;
  Server s(so, /*step_delay_ms=*/5, /*max_num_seqs=*/1);
  s.ready();
  TestConnection c(s.port);
  const std::string body = R"({"prompt": "hi", "max_tokens": 300, "stream": true})";
  c.send("POST /v1/completions HTTP/1.1\r\nHost: h\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\n\r\n" + body);
  EXPECT_NE(c.read_some(100ms).find("data:"), std::string::npos);
  auto r = http_request(s.port, "POST", "/v1/completions", R"({"prompt": "hi", "max_tokens": 2})");
  EXPECT_EQ(r.status, 429);
  EXPECT_EQ(error_of(r)["type"], "rate_limit_error");
  c.close();
  // The slot frees as soon as the first response is gone.
  int status = 0;
  for (int i = 0; i < 100 && status != 200; ++i) {
    status = http_request(s.port, "POST", "/v1/completions", R"({"prompt": "hi", "max_tokens": 2})").status;
    if (status != 200) std::this_thread::sleep_for(20ms);
  }
  EXPECT_EQ(status, 200);
}

TEST(OpenAIServer, ClientThatLeavesFreesItsPagesWithinAStep) {
  Server s({}, /*step_delay_ms=*/20);
  s.ready();
  // A reset is noticed at once. A clean close (FIN) reads like a half-close, so it is noticed by a write: the
  // stream's next chunks, or the liveness probe of an unchunked response (see http_server.h).
  struct Case {
    bool streamed, reset;
    int64_t max_steps;
  };
  for (const Case& k :
       {Case{true, true, 2}, Case{false, true, 2}, Case{true, false, 4}, Case{false, false, 12}}) {
    const bool streamed = k.streamed;
    const int64_t generated = s.engine->metrics().generation_tokens;
    TestConnection c(s.port);
    const std::string body = std::string(R"({"prompt": "hello there", "max_tokens": 300, "stream": )") +
                             (streamed ? "true" : "false") + "}";
    c.send("POST /v1/completions HTTP/1.1\r\nHost: h\r\nContent-Length: " + std::to_string(body.size()) +
           "\r\n\r\n" + body);
    // Wait until it is decoding.
    for (int i = 0; i < 200 && s.engine->metrics().generation_tokens < generated + 3; ++i)
      std::this_thread::sleep_for(5ms);
    ASSERT_GT(s.engine->metrics().kv_full_pages_used, 0);
    const int64_t steps_before = s.engine->metrics().steps;
    if (k.reset)
      c.reset();
    else
      c.close();
    engine::EngineMetrics m;
    for (int i = 0; i < 1000; ++i) {
      m = s.engine->metrics();
      if (m.kv_full_pages_used == 0) break;
      std::this_thread::sleep_for(2ms);
    }
    EXPECT_EQ(m.kv_full_pages_used, 0);
    EXPECT_EQ(m.num_running, 0);
    // Reset: the step in progress when the client left, and the one that takes the abort. Closed: the
    // writes that find it out (two SSE chunks, or 100 ms and two 20 ms steps' worth of probing).
    EXPECT_LE(m.steps - steps_before, k.max_steps)
        << (streamed ? "streamed" : "not streamed") << (k.reset ? ", reset" : ", closed");
  }
  EXPECT_EQ(s.engine->metrics().requests_aborted, 4);
}

}  // namespace
}  // namespace orchid::server
