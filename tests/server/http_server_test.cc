// The HTTP transport on its own: routing to the handler, limits, timeouts, keep-alive and pipelining,
// chunked streams fed from another thread, cancellation when the client goes away (and none when it only
// half-closes), the screen before the body, refused framings, percent-decoding, the request threads and
// their bounded queue, contained exceptions and the per-client connection cap.
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
  void TearDown() override { release_slow_handlers(); }
  void start(HttpServerOptions o = {}) {
    o.port = 0;
    HttpHandlers h;
    h.handle = [this](const HttpRequest& r) -> HttpResponse {
      ++handled;
      if (r.path == "/throw") throw std::runtime_error("boom");
      if (r.path == "/throw-bad-alloc") throw std::bad_alloc();
      if (r.path == "/throw-int") throw 42;
      if (r.path == "/slow") {
        std::unique_lock<std::mutex> lock(mu);
        slow_cv.wait(lock, [&] { return release_slow; });
      }
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
    };
    h.errors = [](int status, const std::string& message) {
      HttpResponse res;
      res.status = status;
      res.body = "error: " + message;
      return res;
    };
    h.screen = [this](const HttpRequest& head) -> std::optional<HttpResponse> {
      if (head.path != "/guarded" || head.header("x-key") == "open") return std::nullopt;
      ++screened;
      HttpResponse res;
      res.status = 401;
      res.body = "no key";
      return res;
    };
    h.answer_inline = [](const HttpRequest& r) { return r.path == "/inline"; };
    server = std::make_unique<HttpServer>(o, std::move(h));
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
  void release_slow_handlers() {
    std::lock_guard<std::mutex> lock(mu);
    release_slow = true;
    slow_cv.notify_all();
  }

  std::atomic<int> handled{0}, screened{0};
  std::mutex mu;
  std::condition_variable slow_cv;
  bool release_slow = false;
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

TEST_F(Fixture, ClientThatResetsCancelsItsStreamAtOnce) {
  start();
  for (const char* path : {"/stream", "/later"}) {
    const size_t index = streams.size();
    TestConnection c(port);
    c.send(std::string("GET ") + path + " HTTP/1.1\r\nHost: h\r\n\r\n");
    auto s = wait_stream(index);
    ASSERT_TRUE(s);
    s->push("first ");
    c.read_some(50ms);
    c.reset();  // no write is pending: only the read probe can notice
    EXPECT_TRUE(s->wait_cancelled(2s)) << path;
  }
  EXPECT_EQ(server->counters().responses_cancelled, 2);
}

TEST_F(Fixture, HalfClosedClientStillGetsItsResponse) {
  start();
  for (const char* path : {"/later", "/stream"}) {
    const size_t index = streams.size();
    TestConnection c(port);
    c.send(std::string("GET ") + path + " HTTP/1.1\r\nHost: h\r\n\r\n");
    c.shutdown_write();
    auto s = wait_stream(index);
    ASSERT_TRUE(s);
    std::this_thread::sleep_for(300ms);  // the EOF has reached the server long before the answer is ready
    s->push("late answer", true);
    auto r = c.read_response();
    ASSERT_TRUE(r) << path;
    EXPECT_EQ(r->body, "late answer");
    // The unchunked answer was preceded by the liveness probes (interim 100s), the stream needed none.
    if (std::string(path) == "/later")
      EXPECT_GE(r->interim, 2);
    else
      EXPECT_EQ(r->interim, 0);
    EXPECT_FALSE(s->wait_cancelled(0ms));
    EXPECT_TRUE(c.closed_by_peer(2s));  // nothing can follow a half-close
  }
  // A plain request answered at once, the same.
  TestConnection c(port);
  c.send("POST /x HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\nhi");
  c.shutdown_write();
  auto r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->body, "POST /x q= body=hi x=");
  EXPECT_EQ(server->counters().responses_cancelled, 0);
}

TEST_F(Fixture, ClientThatClosesCleanlyIsFoundGoneByTheLivenessProbe) {
  start();
  for (const char* path : {"/later", "/stream"}) {
    const size_t index = streams.size();
    TestConnection c(port);
    c.send(std::string("GET ") + path + " HTTP/1.1\r\nHost: h\r\n\r\n");
    auto s = wait_stream(index);
    ASSERT_TRUE(s);
    c.close();  // a FIN, like a half-close: only a write can tell that nobody reads any more
    if (std::string(path) == "/stream") {
      std::this_thread::sleep_for(50ms);
      for (int i = 0; i < 5; ++i) s->push("chunk ");  // a stream finds out at its next writes
    }
    EXPECT_TRUE(s->wait_cancelled(3s)) << path;
  }
  EXPECT_EQ(server->counters().responses_cancelled, 2);
}

TEST_F(Fixture, ScreenAnswersBeforeTheBodyIsRead) {
  start();
  // The body is announced but never sent: the answer comes from the head alone, then the connection closes.
  TestConnection c(port);
  c.send("POST /guarded HTTP/1.1\r\nHost: h\r\nContent-Length: 1000000000\r\n\r\npartial");
  auto r = c.read_response(2s);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  EXPECT_EQ(r->header("connection"), "close");
  EXPECT_TRUE(c.closed_by_peer(5s));
  EXPECT_EQ(handled, 0);
  // Without a body the connection stays usable.
  TestConnection k(port);
  k.send("GET /guarded HTTP/1.1\r\nHost: h\r\n\r\nGET /guarded HTTP/1.1\r\nHost: h\r\nX-Key: open\r\n\r\n");
  auto r1 = k.read_response(), r2 = k.read_response();
  ASSERT_TRUE(r1 && r2);
  EXPECT_EQ(r1->status, 401);
  EXPECT_EQ(r2->status, 200);
  EXPECT_EQ(screened, 2);
}

TEST_F(Fixture, ExpectContinueIsNotSentWhenTheScreenAnswers) {
  start();
  TestConnection c(port);
  c.send("POST /guarded HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n");
  auto r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
}

TEST_F(Fixture, FramingItCannotHonourIsRefused) {
  start();
  for (const char* te : {"gzip, chunked", "chunked, gzip", "gzip", "identity"}) {
    TestConnection c(port);
    c.send(std::string("POST /x HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: ") + te +
           "\r\n\r\n3\r\nabc\r\n0\r\n\r\n");
    auto r = c.read_response();
    ASSERT_TRUE(r) << te;
    EXPECT_EQ(r->status, 501) << te;
  }
  TestConnection chunked(port);
  chunked.send("POST /x HTTP/1.1\r\nHost: h\r\nTransfer-Encoding:  Chunked \r\n\r\n3\r\nabc\r\n0\r\n\r\n");
  auto ok = chunked.read_response();
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->body, "POST /x q= body=abc x=");
  auto gz = test::http_request(port, "POST", "/x", "abc", "Content-Encoding: gzip\r\n");
  EXPECT_EQ(gz.status, 415);
  EXPECT_EQ(test::http_request(port, "POST", "/x", "abc", "Content-Encoding: identity\r\n").status, 200);
  EXPECT_EQ(handled, 2);
}

TEST_F(Fixture, PathsArePercentDecoded) {
  start();
  auto r = test::http_request(port, "GET", "/models/openai%2Fgpt-oss%2d20b?a=%2F");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "GET /models/openai/gpt-oss-20b q=a=%2F body= x=");  // the query is left as sent
  for (const char* bad : {"/a%2", "/a%zz", "/a%", "/a%00b"})
    EXPECT_EQ(test::http_request(port, "GET", bad).status, 400) << bad;
}

TEST_F(Fixture, HandlersRunOffTheIoThreadsAndAFullQueueGets503) {
  HttpServerOptions o;
  o.threads = 1;
  o.request_threads = 1;
  o.max_queued_requests = 1;
  start(o);
  TestConnection running(port), waiting(port), refused(port);
  running.send("GET /slow HTTP/1.1\r\nHost: h\r\n\r\n");
  for (int i = 0; i < 500 && handled == 0; ++i) std::this_thread::sleep_for(2ms);
  waiting.send("GET /slow HTTP/1.1\r\nHost: h\r\n\r\n");
  for (int i = 0; i < 500 && server->counters().requests_queued == 0; ++i) std::this_thread::sleep_for(2ms);
  refused.send("GET /slow HTTP/1.1\r\nHost: h\r\n\r\n");
  auto busy = refused.read_response();
  ASSERT_TRUE(busy);
  EXPECT_EQ(busy->status, 503);
  EXPECT_EQ(busy->header("retry-after"), "1");
  // The one I/O thread still answers inline routes while the request thread is blocked.
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(test::http_request(port, "GET", "/inline").status, 200);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s);
  release_slow_handlers();
  auto a = running.read_response(), b = waiting.read_response();
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->status, 200);
  EXPECT_EQ(b->status, 200);
  EXPECT_EQ(server->counters().requests_rejected_busy, 1);
}

TEST_F(Fixture, ExceptionsNeverEscape) {
  start();
  auto oom = test::http_request(port, "GET", "/throw-bad-alloc");
  EXPECT_EQ(oom.status, 503);
  EXPECT_EQ(oom.header("retry-after"), "1");
  EXPECT_EQ(test::http_request(port, "GET", "/throw-int").status, 500);
  EXPECT_EQ(test::http_request(port, "GET", "/throw").status, 500);
  EXPECT_EQ(test::http_request(port, "GET", "/ok").status, 200);
}

TEST_F(Fixture, ConnectionsPerClientAreCapped) {
  HttpServerOptions o;
  o.max_connections_per_client = 2;
  start(o);
  TestConnection a(port), b(port);
  a.send("GET /a HTTP/1.1\r\nHost: h\r\n\r\n");
  ASSERT_TRUE(a.read_response());  // both are counted once the server has taken them
  b.send("GET /b HTTP/1.1\r\nHost: h\r\n\r\n");
  ASSERT_TRUE(b.read_response());
  TestConnection over(port);
  over.send("GET /c HTTP/1.1\r\nHost: h\r\n\r\n");
  auto r = over.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 429);
  EXPECT_NE(r->body.find("limit is 2"), std::string::npos);
  EXPECT_TRUE(over.closed_by_peer(2s));
  a.close();  // one leaves: room for another
  bool served = false;
  for (int i = 0; i < 100 && !served; ++i) {
    served = test::http_request(port, "GET", "/d").status == 200;
    if (!served) std::this_thread::sleep_for(10ms);
  }
  EXPECT_TRUE(served);
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
