// The HTTP/1.1 server behind `orchid serve`, reduced to what the API layer needs: routes get a parsed request
// and return a response that is either complete or produced later (a streamed SSE body, or a whole response
// computed by the engine). The library underneath (Boost.Beast/Asio) stays inside http_server.cc.
//
// What the transport guarantees, so handlers need not: request bodies over the limit get 413 before they are
// read, slow or idle clients time out, and a client that goes away while a response is still being produced
// (its socket reads EOF or fails) cancels that response at once, not at the next write.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
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
};

struct HttpCounters {
  int64_t connections_open = 0;
  int64_t connections_total = 0;
  int64_t connections_rejected = 0;
  int64_t requests_active = 0;  // read and not yet answered in full
  int64_t requests_total = 0;
  int64_t responses_cancelled = 0;  // the client left while its response was being produced
  int64_t timeouts = 0;
};

class HttpServer {
 public:
  using Handler = std::function<HttpResponse(const HttpRequest&)>;
  // Transport errors (bad request line, body too large, ...) are answered with this: status and message.
  using ErrorFormatter = std::function<HttpResponse(int status, const std::string& message)>;

  HttpServer(HttpServerOptions options, Handler handler, ErrorFormatter errors);
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
