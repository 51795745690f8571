// The HTTP/1.1 server behind `orchid serve`, reduced to what the API layer needs: routes get a parsed request
// and return a response that is either complete or produced later (a streamed SSE body, or a whole response
// computed by the engine). The library underneath (Boost.Beast/Asio) stays inside http_server.cc.
//
// What the transport guarantees, so handlers need not:
// - Memory: a request body grows with the bytes received (a declared Content-Length reserves nothing), and a
//   declared or received size over the limit gets 413 at once. Slow or idle clients time out.
// - The head is screened before the body is read (`HttpHandlers::screen`: the API key). A response given
//   there is sent without reading the body; if a body was announced the connection then closes, after a
//   short lingering read that discards what the client is still sending (so that it sees the answer instead
//   of a reset). Draining instead would let an unauthenticated client make the server read gigabytes.
// - Framing it cannot honour is refused, never ignored: a Transfer-Encoding other than exactly `chunked`
//   gets 501, a Content-Encoding other than identity 415.
// - Paths are percent-decoded; an invalid escape gets 400.
// - Handlers run on a bounded pool of request threads, except those `answer_inline` picks (cheap routes such
//   as /health), so a large prompt being parsed and tokenized never stalls the I/O threads. A full queue
//   gets 503 with Retry-After.
// - No exception leaves an I/O or request thread: a failing handler gets 500 (503 when it ran out of
//   memory), a failure inside the transport closes that one connection.
// - At most `max_connections_per_client` connections per remote address; the ones over get 429 and close.
// - Half-close: a client that shuts down its sending side after its request (EOF on our read) still gets
//   its response; the connection closes after it. A client that is really gone shows as a reset (cancels
//   the response at once) or as a failed write. An EOF alone cannot tell a half-close from a client that
//   closed completely, so after one the server writes to find out: an SSE stream at its next chunks; an
//   unchunked response, which has nothing to write until it is done, with interim `100 Continue`
//   responses (at once, after 100 ms, then every second), which HTTP/1.1 clients skip and a vanished client
//   answers with a reset. The trade-off: a half-closed client sees those interim responses before its
//   answer (legal, RFC 9110 §15.2, and skipped by http.client, httpx, curl), and HTTP/1.0 clients, which
//   must not get 1xx, have an unchunked response that runs to its end (bounded by max_tokens) when they
//   close cleanly.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace orchid::server {

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string path;    // without the query string
  std::string query;
  std::vector<std::pair<std::string, std::string>> headers;  // names in lower case
  std::string body;

  // The first header with this (lower-case) name, or "".
  std::string_view header(std::string_view name) const;
};

class ResponseStream;

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  // When set, the response is produced later by the stream (see ResponseStream).
  std::shared_ptr<ResponseStream> stream;
};

// A response produced over time. The server calls start() once, then pull() on the connection's own thread
// of control after each wake (and right after start), and cancel() if the client leaves before the end.
class ResponseStream {
 public:
  enum class Pull { kPending, kData, kDone };

  virtual ~ResponseStream() = default;
  // True: the head (status 200, headers of the HttpResponse) is sent at once and the body follows in chunks
  // (SSE). False: nothing is sent until pull() returns kDone, which then fills the whole response.
  virtual bool chunked() const = 0;
  // `wake` may be called from any thread, any number of times; calls are coalesced.
  virtual void start(std::function<void()> wake) = 0;
  // Appends the next part of the body to `body`. Unchunked streams fill `response` when they return kDone.
  virtual Pull pull(std::string* body, HttpResponse* response) = 0;
  // The client disconnected, timed out or the server is closing; the stream will not be pulled again.
  virtual void cancel() = 0;
};

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: any free port (see HttpServer::port())
  int threads = 2;
  size_t max_body_bytes = 16u << 20;
  size_t max_header_bytes = 64u << 10;
  std::chrono::milliseconds request_timeout{30000};  // to receive one whole request
  std::chrono::milliseconds idle_timeout{65000};     // keep-alive wait for the next request
  std::chrono::milliseconds write_timeout{60000};    // for one write to make progress
  int max_connections = 4096;                        // more are accepted and closed at once
  int max_connections_per_client = 1024;             // per remote address, 0: no limit; more get 429
  int request_threads = 0;                           // <= 0: default_request_threads()
  size_t max_queued_requests = 0;                    // waiting for a request thread; 0: the default
  std::chrono::milliseconds linger_timeout{2000};    // discarding an unread body before closing
};

struct HttpCounters {
  int64_t connections_open = 0;
  int64_t connections_total = 0;
  int64_t connections_rejected = 0;
  int64_t requests_active = 0;  // read and not yet answered in full
  int64_t requests_total = 0;
  int64_t responses_cancelled = 0;  // the client left while its response was being produced
  int64_t timeouts = 0;
  int64_t requests_queued = 0;         // waiting for a request thread
  int64_t requests_rejected_busy = 0;  // 503: the request threads' queue was full
};

struct HttpHandlers {
  // Answers a whole request (any thread; on a request thread unless answer_inline says otherwise).
  std::function<HttpResponse(const HttpRequest&)> handle;
  // Transport errors (bad request line, body too large, ...) are answered with this: status and message.
  std::function<HttpResponse(int status, const std::string& message)> errors;
  // Optional: sees the head (the body is still unread and empty) and may answer in place of `handle`.
  std::function<std::optional<HttpResponse>(const HttpRequest& head)> screen;
  // Optional: true for requests cheap enough to answer on the I/O thread itself.
  std::function<bool(const HttpRequest&)> answer_inline;
};

class HttpServer {
 public:
  HttpServer(HttpServerOptions options, HttpHandlers handlers);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds and starts serving on background threads. Throws orchid::Error if the address cannot be bound.
  void start();
  int port() const;  // the bound port
  // Stops accepting connections; open connections finish their current response and then close.
  void stop_accepting();
  // Closes everything (cancelling responses in progress) and joins the threads.
  void stop();
  HttpCounters counters() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace orchid::server
