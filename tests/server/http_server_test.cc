// The HTTP transport on its own: routing to the handler, limits, timeouts, keep-alive and pipelining,
// chunked streams fed from another thread, and cancellation when the client goes away.
#include "server/http_server.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "http_test_client.h"

namespace orchid::server {
namespace {

using namespace std::chrono_literals;
using test::TestConnection;

// Body chunks pushed from a test thread; records cancellation.
class PushStream : public ResponseStream {
 public:
  explicit PushStream(bool chunked) : chunked_(chunked) {}
  bool chunked() const override { return chunked_; }
  void start(std::function<void()> wake) override {
    std::lock_guard<std::mutex> lock(mu_);
    wake_ = std::move(wake);
  }
  Pull pull(std::string* body, HttpResponse* response) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!chunked_) {
      if (!done_) return Pull::kPending;
      response->body = pending_;
      return Pull::kDone;
    }
    *body += pending_;
    pending_.clear();
    if (done_) return Pull::kDone;
    return body->empty() ? Pull::kPending : Pull::kData;
  }
  void cancel() override {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled_ = true;
    cv_.notify_all();
  }
  void push(const std::string& s, bool done = false) {
    std::function<void()> wake;
    {
      std::lock_guard<std::mutex> lock(mu_);
      pending_ += s;
      done_ = done;
      wake = wake_;
    }
    if (wake) wake();
  }
  bool wait_cancelled(std::chrono::milliseconds t) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, t, [&] { return cancelled_; });
  }
  bool started() {
    std::lock_guard<std::mutex> lock(mu_);
    return bool(wake_);
  }

 private:
  const bool chunked_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::function<void()> wake_;
  std::string pending_;
  bool done_ = false, cancelled_ = false;
};

struct Fixture : ::testing::Test {
  void start(HttpServerOptions o = {}) {
    o.port = 0;
    server = std::make_unique<HttpServer>(
        o,
        [this](const HttpRequest& r) -> HttpResponse {
          ++handled;
          if (r.path == "/throw") throw std::runtime_error("boom");
          if (r.path == "/stream" || r.path == "/later") {
            auto s = std::make_shared<PushStream>(r.path == "/stream");
            {
              std::lock_guard<std::mutex> lock(mu);
              streams.push_back(s);
            }
            HttpResponse res;
            res.content_type = "text/event-stream";
            res.stream = s;
            return res;
          }
          HttpResponse res;
          res.content_type = "text/plain";
          res.body = r.method + " " + r.path + " q=" + r.query + " body=" + r.body +
                     " x=" + std::string(r.header("x-test"));
          return res;
        },
        [](int status, const std::string& message) {
          HttpResponse res;
          res.status = status;
          res.body = "error: " + message;
          return res;
        });
    server->start();
    port = server->port();
  }
  std::shared_ptr<PushStream> wait_stream(size_t i) {
    for (int k = 0; k < 500; ++k) {
      {
        std::lock_guard<std::mutex> lock(mu);
        if (streams.size() > i && streams[i]->started()) return streams[i];
      }
      std::this_thread::sleep_for(2ms);
    }
    return nullptr;
  }

  std::unique_ptr<HttpServer> server;
  int port = 0;
  std::atomic<int> handled{0};
  std::mutex mu;
  std::vector<std::shared_ptr<PushStream>> streams;
};

TEST_F(Fixture, RoutesRequestsAndKeepsConnectionsAlive) {
  start();
  TestConnection c(port);
  c.send("POST /a/b?x=1 HTTP/1.1\r\nHost: h\r\nX-Test: yes\r\nContent-Length: 5\r\n\r\nhello");
  auto r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "POST /a/b q=x=1 body=hello x=yes");
  // The same connection serves the next request, and two pipelined ones in order.
  c.send("GET /one HTTP/1.1\r\nHost: h\r\n\r\nGET /two HTTP/1.1\r\nHost: h\r\n\r\n");
  auto r1 = c.read_response(), r2 = c.read_response();
  ASSERT_TRUE(r1 && r2);
  EXPECT_EQ(r1->body, "GET /one q= body= x=");
  EXPECT_EQ(r2->body, "GET /two q= body= x=");
  EXPECT_EQ(server->counters().requests_total, 3);
}

TEST_F(Fixture, BodyOverTheLimitGets413WithoutReadingIt) {
  HttpServerOptions o;
  o.max_body_bytes = 1000;
  start(o);
  TestConnection c(port);
  // Only the head is sent: the limit is enforced from Content-Length.
  c.send("POST /x HTTP/1.1\r\nHost: h\r\nContent-Length: 100000000\r\n\r\n");
  auto r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 413);
  EXPECT_NE(r->body.find("1000 bytes"), std::string::npos);
  EXPECT_TRUE(c.closed_by_peer(2s));
  EXPECT_EQ(handled, 0);
  // Chunked bodies are counted as they arrive.
  TestConnection c2(port);
  c2.send("POST /x HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n400\r\n" +
          std::string(1024, 'a') + "\r\n");
  auto r2 = c2.read_response();
  ASSERT_TRUE(r2);
  EXPECT_EQ(r2->status, 413);
}

TEST_F(Fixture, MalformedRequestsGet400AndHandlersThatThrowGet500) {
  start();
  TestConnection c(port);
  c.send("BLAH\r\n\r\n");
  auto r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(test::http_request(port, "GET", "/throw").status, 500);
  EXPECT_EQ(test::http_request(port, "GET", "/ok").status, 200);  // still serving
}

TEST_F(Fixture, HeadersOverTheLimitGet431) {
  HttpServerOptions o;
  o.max_header_bytes = 2048;
  start(o);
  auto r = test::http_request(port, "GET", "/x", "", "X-Big: " + std::string(4096, 'b') + "\r\n");
  EXPECT_EQ(r.status, 431);
}

TEST_F(Fixture, ExpectContinueIsAnswered) {
  start();
  TestConnection c(port);
  c.send("POST /e HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n");
  const std::string interim = c.read_some(300ms);
  EXPECT_NE(interim.find("100 Continue"), std::string::npos);
  c.send("abc");
  auto r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->body, "POST /e q= body=abc x=");
}

TEST_F(Fixture, SlowRequestsTimeOut) {
  HttpServerOptions o;
  o.request_timeout = 200ms;
  o.idle_timeout = 200ms;
  start(o);
  TestConnection c(port);
  c.send("POST /x HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\n\r\nabc");  // 7 bytes never come
  EXPECT_TRUE(c.closed_by_peer(3s));
  TestConnection idle(port);
  EXPECT_TRUE(idle.closed_by_peer(3s));
  EXPECT_GE(server->counters().timeouts, 2);
}

TEST_F(Fixture, ChunkedStreamDeliversPushesFromAnotherThread) {
  start();
  TestConnection c(port);
  c.send("GET /stream HTTP/1.1\r\nHost: h\r\n\r\n");
  auto s = wait_stream(0);
  ASSERT_TRUE(s);
  std::thread producer([&] {
    for (int i = 0; i < 50; ++i) s->push("data: " + std::to_string(i) + "\n\n");
    s->push("end", true);
  });
  auto r = c.read_response();
  producer.join();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->header("content-type"), "text/event-stream");
  std::string expected;
  for (int i = 0; i < 50; ++i) expected += "data: " + std::to_string(i) + "\n\n";
  EXPECT_EQ(r->body, expected + "end");
  // The connection is reusable after a stream.
  c.send("GET /after HTTP/1.1\r\nHost: h\r\n\r\n");
  auto r2 = c.read_response();
  ASSERT_TRUE(r2);
  EXPECT_EQ(r2->body, "GET /after q= body= x=");
  // The count drops when the server's write completes, which may be just after the client has read it.
  for (int i = 0; i < 200 && server->counters().requests_active != 0; ++i) std::this_thread::sleep_for(5ms);
  EXPECT_EQ(server->counters().requests_active, 0);
}

TEST_F(Fixture, UnchunkedStreamAnswersOnceDone) {
  start();
  TestConnection c(port);
  c.send("GET /later HTTP/1.1\r\nHost: h\r\n\r\n");
  auto s = wait_stream(0);
  ASSERT_TRUE(s);
  EXPECT_EQ(c.read_some(100ms), "");  // nothing before the end
  s->push("whole");
  s->push(" answer", true);
  auto r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "whole answer");
}

TEST_F(Fixture, ClientThatLeavesCancelsItsStreamAtOnce) {
  start();
  for (const char* path : {"/stream", "/later"}) {
    const size_t index = streams.size();
    TestConnection c(port);
    c.send(std::string("GET ") + path + " HTTP/1.1\r\nHost: h\r\n\r\n");
    auto s = wait_stream(index);
    ASSERT_TRUE(s);
    s->push("first ");
    c.read_some(50ms);
    c.close();  // no write is pending: only the read probe can notice
    EXPECT_TRUE(s->wait_cancelled(2s)) << path;
  }
  EXPECT_EQ(server->counters().responses_cancelled, 2);
}

TEST_F(Fixture, StopAcceptingRefusesNewConnectionsButFinishesStreams) {
  start();
  TestConnection c(port);
  c.send("GET /stream HTTP/1.1\r\nHost: h\r\n\r\n");
  auto s = wait_stream(0);
  ASSERT_TRUE(s);
  server->stop_accepting();
  std::this_thread::sleep_for(50ms);
  s->push("tail", true);
  auto r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->body, "tail");
  EXPECT_TRUE(c.closed_by_peer(2s));  // no next request on a draining server
  EXPECT_THROW(test::http_request(port, "GET", "/x"), std::runtime_error);
}

}  // namespace
}  // namespace orchid::server
