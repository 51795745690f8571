// HttpServer on Boost.Beast/Asio (header-only, so the binary needs no HTTP library at run time).
//
// One io_context run by a few threads; every connection is a Session on its own strand, so its handlers never
// run concurrently. Handlers that may be slow run on RequestWorkers and post their result back to the
// session's strand. While a response is being produced the session keeps a one-byte read pending on the
// socket: a reset completes it at once, which is how a vanished client cancels its request within an engine
// step instead of at its next write; an EOF only means the client has finished sending (see http_server.h).
// Timeouts use one deadline timer per session.
#include "server/http_server.h"

#include <spdlog/spdlog.h>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <atomic>
#include <cctype>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <new>
#include <optional>
#include <thread>
#include <unordered_set>

#include "core/error.h"
#include "server/growing_body.h"
#include "server/request_workers.h"
#include "server/url_path.h"

namespace orchid::server {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

std::string_view HttpRequest::header(std::string_view name) const {
  for (const auto& [k, v] : headers)
    if (k == name) return v;
  return {};
}

namespace {

// What a lingering close reads and discards at most before it closes anyway.
constexpr size_t kMaxLingerBytes = 8u << 20;

struct AtomicCounters {
  std::atomic<int64_t> connections_open{0}, connections_total{0}, connections_rejected{0};
  std::atomic<int64_t> requests_active{0}, requests_total{0}, responses_cancelled{0}, timeouts{0};
  std::atomic<int64_t> requests_rejected_busy{0};
};

class Session;

struct ServerState {
  HttpServerOptions options;
  HttpHandlers handlers;
  net::io_context ioc;
  std::optional<tcp::acceptor> acceptor;
  std::vector<std::thread> threads;
  std::atomic<bool> draining{false};
  int bound_port = 0;
  AtomicCounters counters;
  std::mutex sessions_mu;
  std::unordered_set<Session*> sessions;
  std::map<net::ip::address, int> connections_per_client;  // under sessions_mu
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work;
  // Declared after ioc: its queued jobs hold sessions, whose sockets must go before the io_context.
  std::unique_ptr<RequestWorkers> workers;

  void accept();
  template <typename F>
  void for_each_session(F f);
};

std::string chunk_frame(std::string_view data) {
  if (data.empty()) return {};
  return fmt::format("{:x}\r\n", data.size()) + std::string(data) + "\r\n";
}

bool is_out_of_memory(const std::exception& e) {
  return dynamic_cast<const std::bad_alloc*>(&e) != nullptr;
}

// The handler's answer; its exceptions become 500, or 503 when memory ran out (worth a retry).
HttpResponse run_handler(const HttpHandlers& h, const HttpRequest& r) {
  try {
    return h.handle(r);
  } catch (const std::exception& e) {
    spdlog::error("http: handler for {} {}: {}", r.method, r.path, e.what());
    if (!is_out_of_memory(e)) return h.errors(500, "internal error while handling the request");
  } catch (...) {
    spdlog::error("http: handler for {} {}: unknown exception", r.method, r.path);
    return h.errors(500, "internal error while handling the request");
  }
  HttpResponse res = h.errors(503, "the server ran out of memory for this request; retry later");
  res.headers.emplace_back("Retry-After", "1");
  return res;
}

// The Transfer-Encoding is exactly "chunked" (any case, surrounding blanks).
bool is_plain_chunked(std::string_view te) {
  while (!te.empty() && (te.front() == ' ' || te.front() == '\t')) te.remove_prefix(1);
  while (!te.empty() && (te.back() == ' ' || te.back() == '\t')) te.remove_suffix(1);
  return beast::iequals(te, "chunked");
}

class Session : public std::enable_shared_from_this<Session> {
 public:
  // `client`: the remote address counted against the per-client limit; nullopt: over it, answered 429.
  Session(tcp::socket socket, ServerState* server, std::optional<net::ip::address> client)
      : socket_(std::move(socket)),
        timer_(socket_.get_executor()),
        liveness_timer_(socket_.get_executor()),
        server_(server),
        client_(client) {
    std::lock_guard<std::mutex> lock(server_->sessions_mu);
    server_->sessions.insert(this);
    ++server_->counters.connections_open;
    ++server_->counters.connections_total;
  }
  ~Session() {
    if (request_open_) --server_->counters.requests_active;
    --server_->counters.connections_open;
    std::lock_guard<std::mutex> lock(server_->sessions_mu);
    server_->sessions.erase(this);
    if (client_) {
      auto it = server_->connections_per_client.find(*client_);
      if (it != server_->connections_per_client.end() && --it->second <= 0)
        server_->connections_per_client.erase(it);
    }
  }

  void start() { read_request(/*first=*/true); }

  // Any thread: close now if no request is in progress (draining), or unconditionally.
  void close_async(bool only_if_idle) {
    net::post(socket_.get_executor(), [self = shared_from_this(), only_if_idle] {
      if (only_if_idle && self->request_open_) return;
      self->close();
    });
  }

 private:
  const HttpServerOptions& opt() const { return server_->options; }

  // Every completion handler runs through this: an exception (std::bad_alloc above all) ends this
  // connection, with a 500/503 if no byte of a response has been sent yet, and never reaches the thread.
  template <typename F>
  auto guarded(F f) {
    return [self = shared_from_this(), f = std::move(f)](auto&&... args) mutable {
      try {
        f(*self, std::forward<decltype(args)>(args)...);
      } catch (const std::exception& e) {
        self->on_internal_error(e.what(), is_out_of_memory(e));
      } catch (...) {
        self->on_internal_error("unknown exception", false);
      }
    };
  }

  void on_internal_error(const char* what, bool out_of_memory) noexcept {
    spdlog::error("http: connection failed: {}", what);
    if (closed_ || response_started_ || writing_) return close();
    try {
      HttpResponse res = out_of_memory
                             ? server_->handlers.errors(503, "the server ran out of memory; retry later")
                             : server_->handlers.errors(500, "internal error while handling the request");
      if (out_of_memory) res.headers.emplace_back("Retry-After", "1");
      cancel_stream();
      stream_.reset();
      write_response(std::move(res), /*keep_alive=*/false, version_, /*linger=*/true);
    } catch (...) {
      close();
    }
  }

  void arm(std::chrono::milliseconds d) {
    const uint64_t gen = ++timer_gen_;
    timer_.expires_after(d);
    timer_.async_wait([self = shared_from_this(), gen](beast::error_code ec) {
      if (ec || gen != self->timer_gen_) return;
      if (!self->lingering_) ++self->server_->counters.timeouts;
      self->close();
    });
  }
  void disarm() {
    ++timer_gen_;
    timer_.cancel();
  }

  void close() noexcept {
    const std::shared_ptr<Session> self = std::move(hold_);  // released when this returns
    if (closed_) return;
    closed_ = true;
    gone_ = true;
    cancel_stream();
    disarm();
    liveness_timer_.cancel();
    beast::error_code ec;
    socket_.shutdown(tcp::socket::shutdown_both, ec);
    socket_.close(ec);
  }

  // Closes after a response that left part of the request unread: the client may still be sending its
  // body, and closing with unread bytes would reset the connection, often before the client has read the
  // answer. So stop sending, discard what arrives for a moment, then close.
  void linger_close() {
    if (closed_) return;
    lingering_ = true;
    beast::error_code ec;
    socket_.shutdown(tcp::socket::shutdown_send, ec);
    if (ec) return close();
    linger_buffer_ = std::make_unique<char[]>(kLingerChunk);
    arm(opt().linger_timeout);
    linger_read();
  }
  void linger_read() {
    socket_.async_read_some(net::buffer(linger_buffer_.get(), kLingerChunk),
                            guarded([](Session& s, beast::error_code ec, size_t n) {
                              s.lingered_ += n;
                              if (ec || s.lingered_ > kMaxLingerBytes) return s.close();
                              s.linger_read();
                            }));
  }

  void read_request(bool first) {
    if (closed_) return;
    if (server_->draining && !first) return close();
    parser_.emplace();
    // The declared length is checked after the screen (an unauthorized client hears 401, not 413), and the
    // limit then applies to what arrives.
    parser_->body_limit(std::numeric_limits<std::uint64_t>::max());
    parser_->header_limit(uint32_t(opt().max_header_bytes));
    response_started_ = false;
    // A connection over the per-client cap gets only a moment to send the head its 429 answers: it must not
    // hold a slot of the global limit for the whole request timeout.
    arm(!client_ ? opt().linger_timeout : first ? opt().request_timeout : opt().idle_timeout);
    http::async_read_header(socket_, buffer_, *parser_,
                            guarded([](Session& s, beast::error_code ec, size_t) { s.on_header(ec); }));
  }

  void on_header(beast::error_code ec) {
    if (ec) return on_read_error(ec);
    arm(opt().request_timeout);
    auto& req = parser_->get();
    version_ = req.version();
    keep_alive_ = req.keep_alive();
    head_ = HttpRequest{};
    head_.method = std::string(req.method_string());
    const std::string_view target = req.target();
    const size_t q = target.find('?');
    if (q != std::string_view::npos) head_.query = std::string(target.substr(q + 1));
    for (const auto& f : req) {
      std::string name(f.name_string());
      for (char& c : name) c = char(std::tolower(static_cast<unsigned char>(c)));
      head_.headers.emplace_back(std::move(name), std::string(f.value()));
    }
    std::optional<std::string> path = percent_decode_path(target.substr(0, q));
    if (!client_)
      return answer_early(
          /*then_close=*/true,
          server_->handlers.errors(429, fmt::format("too many connections from this client: the limit is {} "
                                                    "at once per address (max_connections_per_client)",
                                                    opt().max_connections_per_client)));
    if (!path)
      return answer_early(server_->handlers.errors(
          400,
          fmt::format("invalid percent-encoding in the request path {}", std::string(target.substr(0, q)))));
    head_.path = std::move(*path);
    if (const std::string_view te = head_.header("transfer-encoding"); !te.empty() && !is_plain_chunked(te))
      return answer_early(
          /*then_close=*/true,  // where this request ends is unknown
          server_->handlers.errors(
              501, fmt::format("Transfer-Encoding `{}` is not implemented; send the body with Content-Length "
                               "or `Transfer-Encoding: chunked` alone",
                               te)));
    if (const std::string_view ce = head_.header("content-encoding");
        !ce.empty() && !beast::iequals(ce, "identity"))
      return answer_early(server_->handlers.errors(
          415, fmt::format("Content-Encoding `{}` is not supported; send the body uncompressed", ce)));
    if (server_->handlers.screen)
      if (std::optional<HttpResponse> early = server_->handlers.screen(head_))
        return answer_early(std::move(*early));
    if (const auto declared = parser_->content_length(); declared && *declared > opt().max_body_bytes)
      return answer_early(server_->handlers.errors(413, body_too_large()));
    parser_->body_limit(opt().max_body_bytes);
    if (beast::iequals(req[http::field::expect], "100-continue")) {
      out_ = "HTTP/1.1 100 Continue\r\n\r\n";
      net::async_write(socket_, net::buffer(out_), guarded([](Session& s, beast::error_code ec, size_t) {
                         if (ec) return s.close();
                         s.read_body();
                       }));
      return;
    }
    read_body();
  }

  // A response decided from the head alone. Without a body to skip the connection stays usable; with one,
  // it closes (lingering) rather than read a body nobody will use.
  void answer_early(HttpResponse res) { answer_early(/*then_close=*/false, std::move(res)); }
  void answer_early(bool then_close, HttpResponse res) {
    open_request();
    const bool body_unread = !parser_->is_done();
    parser_.reset();
    write_response(std::move(res), keep_alive_ && !body_unread && !then_close, version_,
                   /*linger=*/body_unread || then_close);
  }

  std::string body_too_large() const {
    return fmt::format("request body is larger than the limit of {} bytes", opt().max_body_bytes);
  }

  void read_body() {
    http::async_read(socket_, buffer_, *parser_,
                     guarded([](Session& s, beast::error_code ec, size_t) { s.on_request(ec); }));
  }

  void on_read_error(beast::error_code ec) {
    if (ec == http::error::end_of_stream || ec == net::error::eof || ec == net::error::operation_aborted ||
        ec == net::error::connection_reset || closed_)
      return close();
    // The request itself is bad: answer, then close (the stream position is unknown).
    int status = 400;
    std::string message = fmt::format("malformed HTTP request: {}", ec.message());
    std::vector<std::pair<std::string, std::string>> headers;
    if (ec == http::error::body_limit) {
      status = 413;
      message = body_too_large();
    } else if (ec == http::error::header_limit) {
      status = 431;
      message = fmt::format("request headers are larger than the limit of {} bytes", opt().max_header_bytes);
    } else if (ec == boost::system::errc::not_enough_memory) {
      status = 503;
      message = "the server ran out of memory while reading the request body; retry later";
      headers.emplace_back("Retry-After", "1");
    }
    parser_.reset();
    open_request();
    HttpResponse res = server_->handlers.errors(status, message);
    for (auto& h : headers) res.headers.push_back(std::move(h));
    write_response(std::move(res), /*keep_alive=*/false, /*version=*/11, /*linger=*/true);
  }

  void open_request() {
    if (request_open_) return;
    request_open_ = true;
    ++server_->counters.requests_active;
    ++server_->counters.requests_total;
  }

  void on_request(beast::error_code ec) {
    if (ec) return on_read_error(ec);
    auto request = std::make_shared<HttpRequest>(std::move(head_));
    request->body = std::move(parser_->get().body());
    parser_.reset();
    open_request();
    disarm();
    const HttpHandlers& h = server_->handlers;
    if (h.answer_inline && h.answer_inline(*request)) return on_handled(run_handler(h, *request));
    const bool queued = server_->workers->try_post([self = shared_from_this(), request] {
      if (self->gone_) return;  // the client left while its request waited
      auto res = std::make_shared<HttpResponse>(run_handler(self->server_->handlers, *request));
      net::post(self->socket_.get_executor(),
                self->guarded([res](Session& s) { s.on_handled(std::move(*res)); }));
    });
    if (queued) {
      handling_ = true;
      watch_disconnect();  // a client that resets while its request is prepared is not kept waiting for
      return;
    }
    ++server_->counters.requests_rejected_busy;
    HttpResponse busy = h.errors(503, "the server is busy preparing other requests; retry shortly");
    busy.headers.emplace_back("Retry-After", "1");
    write_response(std::move(busy), keep_alive_, version_);
  }

  void on_handled(HttpResponse res) {
    handling_ = false;
    if (closed_) {
      if (res.stream) res.stream->cancel();
      return;
    }
    if (res.stream) return start_stream(std::move(res));
    write_response(std::move(res), keep_alive_, version_);
  }

  std::shared_ptr<http::response<http::string_body>> make_message(HttpResponse res, bool keep_alive,
                                                                  unsigned version) {
    auto msg = std::make_shared<http::response<http::string_body>>(http::status(res.status), version);
    msg->set(http::field::server, "orchid");
    if (!res.content_type.empty()) msg->set(http::field::content_type, res.content_type);
    for (auto& [k, v] : res.headers) msg->insert(k, v);
    msg->body() = std::move(res.body);
    msg->keep_alive(keep_alive);
    msg->prepare_payload();
    return msg;
  }

  void write_response(HttpResponse res, bool keep_alive, unsigned version, bool linger = false) {
    keep_alive = keep_alive && !server_->draining && !linger;
    auto msg = make_message(std::move(res), keep_alive, version);
    response_started_ = true;
    writing_ = true;
    arm(opt().write_timeout);
    http::async_write(socket_, *msg,
                      guarded([msg, keep_alive, linger](Session& s, beast::error_code ec, size_t) {
                        s.writing_ = false;
                        s.end_request();
                        if (ec) return s.close();
                        if (linger) return s.linger_close();
                        if (!keep_alive) return s.close();
                        s.next_request_after_stream();
                      }));
  }

  void end_request() {
    hold_.reset();  // callers run in a handler that holds the session
    if (!request_open_) return;
    request_open_ = false;
    --server_->counters.requests_active;
  }

  // --- responses produced over time ---

  void start_stream(HttpResponse res) {
    stream_ = res.stream;
    stream_done_ = false;
    chunked_ = stream_->chunked();
    if (chunked_) {
      // HTTP/1.0 has no chunked encoding: the body ends when the connection closes.
      const bool can_chunk = version_ >= 11;
      keep_alive_ = keep_alive_ && can_chunk && !server_->draining;
      use_chunks_ = can_chunk;
      std::string head = fmt::format(
          "HTTP/{}.{} {} {}\r\nServer: orchid\r\nContent-Type: {}\r\n", version_ / 10, version_ % 10,
          res.status, std::string(http::obsolete_reason(http::status(res.status))), res.content_type);
      for (auto& [k, v] : res.headers) head += k + ": " + v + "\r\n";
      if (use_chunks_) head += "Transfer-Encoding: chunked\r\n";
      head += keep_alive_ ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
      pending_out_ = std::move(head);
    }
    std::weak_ptr<Session> weak = weak_from_this();
    auto wake = [weak, flag = wake_flag_] {
      if (flag->exchange(true)) return;
      if (auto self = weak.lock())
        net::post(self->socket_.get_executor(), self->guarded([](Session& s) {
          s.wake_flag_->store(false);
          s.pump();
        }));
    };
    watch_disconnect();
    watch_liveness();
    stream_->start(wake);
    pump();
  }

  // After an EOF nothing can be read, so nothing tells a half-closed client from one that has gone. An SSE
  // stream finds out at its next writes; an unchunked response has nothing to write until it is done, so it
  // sends interim `100 Continue` responses, which HTTP/1.1 clients must skip (RFC 9110 §15.2): a client
  // that is gone answers the first with a reset and the second write fails, cancelling the response.
  // HTTP/1.0 clients must not get 1xx responses: theirs runs to its end.
  void watch_liveness() {
    if (!peer_done_sending_ || !stream_ || chunked_ || version_ < 11 || liveness_armed_) return;
    liveness_armed_ = true;
    liveness_timer_.expires_after(liveness_probes_ < 2 ? std::chrono::milliseconds(100 * liveness_probes_)
                                                       : std::chrono::milliseconds(1000));
    liveness_timer_.async_wait(guarded([](Session& s, beast::error_code ec) {
      s.liveness_armed_ = false;
      if (!ec) s.probe_liveness();
    }));
  }

  void probe_liveness() {
    if (closed_ || !stream_) return;
    if (writing_) return watch_liveness();
    ++liveness_probes_;
    out_ = "HTTP/1.1 100 Continue\r\n\r\n";
    writing_ = true;
    arm(opt().write_timeout);
    net::async_write(socket_, net::buffer(out_), guarded([](Session& s, beast::error_code ec, size_t) {
                       s.writing_ = false;
                       s.disarm();
                       if (ec) {
                         if (s.stream_) ++s.server_->counters.responses_cancelled;
                         return s.close();
                       }
                       s.watch_liveness();
                       s.pump();  // the answer may have become ready meanwhile
                     }));
  }

  void watch_disconnect() {
    if (probing_ || peer_done_sending_) return;
    probing_ = true;
    socket_.async_read_some(net::buffer(probe_),
                            guarded([](Session& s, beast::error_code ec, size_t n) { s.on_probe(ec, n); }));
  }

  void on_probe(beast::error_code ec, size_t n) {
    probing_ = false;
    if (!ec) {
      // Pipelined bytes of a next request: keep them for the parser, within the header limit.
      auto b = buffer_.prepare(n);
      std::memcpy(b.data(), probe_, n);
      buffer_.commit(n);
      if (buffer_.size() > opt().max_header_bytes) return close();
    }
    if (ec == net::error::eof) {
      // A half-close: the client has sent all it will. Its response still goes out; nothing can follow.
      peer_done_sending_ = true;
      keep_alive_ = false;
      // No read is pending from now on: the response in progress keeps the session alive itself.
      if (request_open_) hold_ = shared_from_this();
      watch_liveness();
      if (next_after_probe_) {
        next_after_probe_ = false;
        return close();
      }
      return;
    }
    if (stream_ || handling_) {
      if (!ec) return watch_disconnect();
      ++server_->counters.responses_cancelled;  // reset: the client went away
      return close();
    }
    if (next_after_probe_) {  // the response is complete and the probe was cancelled to read the next request
      next_after_probe_ = false;
      if (!ec || ec == net::error::operation_aborted) return read_request(/*first=*/false);
      return close();
    }
    // The final write is still in flight; the next read sees the reset again.
  }

  void pump() {
    if (!stream_ || writing_ || closed_) return;
    std::string body;
    HttpResponse full;
    ResponseStream::Pull p;
    try {
      p = stream_->pull(&body, &full);
    } catch (const std::exception& e) {
      spdlog::error("http: response stream: {}", e.what());
      if (chunked_) return close();
      full = server_->handlers.errors(500, "internal error while producing the response");
      p = ResponseStream::Pull::kDone;
    }
    if (p == ResponseStream::Pull::kPending && pending_out_.empty()) return;
    if (!chunked_) {
      if (p != ResponseStream::Pull::kDone) return;
      finish_stream_state();
      return write_response(std::move(full), keep_alive_, version_);
    }
    std::string out = std::move(pending_out_);
    pending_out_.clear();
    out += use_chunks_ ? chunk_frame(body) : body;
    const bool done = p == ResponseStream::Pull::kDone;
    if (done && use_chunks_) out += "0\r\n\r\n";
    if (done) finish_stream_state();
    out_ = std::move(out);
    writing_ = true;
    response_started_ = true;
    arm(opt().write_timeout);
    net::async_write(socket_, net::buffer(out_), guarded([done](Session& s, beast::error_code ec, size_t) {
                       s.writing_ = false;
                       if (ec) {
                         if (s.stream_) ++s.server_->counters.responses_cancelled;
                         return s.close();
                       }
                       if (!done) {
                         s.disarm();
                         return s.pump();
                       }
                       s.end_request();
                       if (!s.keep_alive_) return s.close();
                       s.next_request_after_stream();
                     }));
  }

  void finish_stream_state() {
    stream_done_ = true;
    stream_.reset();
  }

  void next_request_after_stream() {
    if (probing_) {
      // Cancel the pending probe read; its handler starts the next request.
      next_after_probe_ = true;
      beast::error_code ec;
      socket_.cancel(ec);
      return;
    }
    if (peer_done_sending_) return close();
    read_request(/*first=*/false);
  }

  void cancel_stream() noexcept {
    if (stream_ && !stream_done_) {
      auto s = std::move(stream_);
      stream_.reset();
      try {
        s->cancel();
      } catch (...) {
      }
    }
  }

  static constexpr size_t kLingerChunk = 16u << 10;

  tcp::socket socket_;
  net::steady_timer timer_;
  uint64_t timer_gen_ = 0;
  net::steady_timer liveness_timer_;  // see watch_liveness()
  bool liveness_armed_ = false;
  int liveness_probes_ = 0;
  ServerState* server_;
  std::optional<net::ip::address> client_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<GrowingBody>> parser_;
  HttpRequest head_;  // of the request being read
  unsigned version_ = 11;
  bool keep_alive_ = true;
  bool request_open_ = false;
  bool response_started_ = false;  // a byte of the current response may have been sent
  bool closed_ = false;
  std::atomic<bool> gone_{false};  // closed_, for a request thread to read
  bool handling_ = false;          // the handler runs on a request thread
  bool lingering_ = false;
  bool peer_done_sending_ = false;  // read EOF: the client half-closed (or closed)
  std::shared_ptr<Session> hold_;   // self, while a response is produced for a half-closed client
  size_t lingered_ = 0;
  std::unique_ptr<char[]> linger_buffer_;
  std::string out_;  // bytes of the write in flight

  std::shared_ptr<ResponseStream> stream_;
  bool stream_done_ = false;
  bool chunked_ = false;
  bool use_chunks_ = true;
  bool writing_ = false;
  bool probing_ = false;
  bool next_after_probe_ = false;
  char probe_[1];
  std::string pending_out_;  // the head of a chunked response, sent with the first chunk
  std::shared_ptr<std::atomic<bool>> wake_flag_ = std::make_shared<std::atomic<bool>>(false);
};

template <typename F>
void ServerState::for_each_session(F f) {
  std::vector<std::shared_ptr<Session>> live;
  {
    std::lock_guard<std::mutex> lock(sessions_mu);
    for (Session* s : sessions)
      if (auto p = s->weak_from_this().lock()) live.push_back(std::move(p));
  }
  for (auto& s : live) f(*s);
}

void ServerState::accept() {
  acceptor->async_accept(net::make_strand(ioc), [this](beast::error_code ec, tcp::socket socket) {
    if (ec) {
      if (ec == net::error::operation_aborted || !acceptor->is_open()) return;
      spdlog::warn("http: accept: {}", ec.message());
      // EMFILE and friends: back off briefly instead of spinning.
      auto t = std::make_shared<net::steady_timer>(ioc, std::chrono::milliseconds(50));
      t->async_wait([this, t](beast::error_code) {
        if (acceptor && acceptor->is_open()) accept();
      });
      return;
    }
    try {
      if (counters.connections_open >= options.max_connections) {
        ++counters.connections_rejected;
        beast::error_code ignored;
        socket.close(ignored);
      } else {
        beast::error_code ignored;
        socket.set_option(tcp::no_delay(true), ignored);
        // Counted here, under the lock, so that a burst of connections cannot all slip under the limit.
        std::optional<net::ip::address> client;
        const tcp::endpoint remote = socket.remote_endpoint(ignored);
        {
          std::lock_guard<std::mutex> lock(sessions_mu);
          int& n = connections_per_client[remote.address()];
          if (options.max_connections_per_client <= 0 || n < options.max_connections_per_client) {
            ++n;
            client = remote.address();
          } else {
            ++counters.connections_rejected;
          }
        }
        std::make_shared<Session>(std::move(socket), this, client)->start();
      }
    } catch (const std::exception& e) {  // out of memory for one more connection: that one is dropped
      spdlog::error("http: accept: {}", e.what());
    }
    accept();
  });
}

}  // namespace

struct HttpServer::Impl : ServerState {};

HttpServer::HttpServer(HttpServerOptions options, HttpHandlers handlers) : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  impl_->handlers = std::move(handlers);
}

HttpServer::~HttpServer() {
  stop();
}

void HttpServer::start() {
  Impl& s = *impl_;
  beast::error_code ec;
  tcp::resolver resolver(s.ioc);
  auto results = resolver.resolve(s.options.host, std::to_string(s.options.port),
                                  tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec || results.empty())
    fail("--host {}: cannot resolve the address: {}", s.options.host, ec ? ec.message() : "no result");
  const tcp::endpoint ep = results.begin()->endpoint();
  s.acceptor.emplace(s.ioc);
  s.acceptor->open(ep.protocol(), ec);
  if (!ec) s.acceptor->set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) s.acceptor->bind(ep, ec);
  if (!ec) s.acceptor->listen(net::socket_base::max_listen_connections, ec);
  if (ec) fail("--host {} --port {}: cannot listen: {}", s.options.host, s.options.port, ec.message());
  s.bound_port = s.acceptor->local_endpoint().port();
  const int request_threads =
      s.options.request_threads > 0 ? s.options.request_threads : default_request_threads();
  const size_t max_queued = s.options.max_queued_requests > 0 ? s.options.max_queued_requests
                                                              : default_max_queued_requests(request_threads);
  s.workers = std::make_unique<RequestWorkers>(request_threads, max_queued);
  s.work.emplace(s.ioc.get_executor());
  s.accept();
  for (int i = 0; i < std::max(1, s.options.threads); ++i)
    s.threads.emplace_back([&s] {
      // Sessions contain their own failures; this is the last line, so that none ends the process.
      for (;;) {
        try {
          s.ioc.run();
          return;
        } catch (const std::exception& e) {
          spdlog::error("http: I/O thread: {}", e.what());
        } catch (...) {
          spdlog::error("http: I/O thread: unknown exception");
        }
      }
    });
}

int HttpServer::port() const {
  return impl_->bound_port;
}

void HttpServer::stop_accepting() {
  Impl& s = *impl_;
  if (s.draining.exchange(true)) return;
  net::post(s.ioc, [&s] {
    beast::error_code ec;
    if (s.acceptor) s.acceptor->close(ec);
  });
  s.for_each_session([](Session& x) { x.close_async(/*only_if_idle=*/true); });
}

void HttpServer::stop() {
  Impl& s = *impl_;
  if (s.threads.empty()) return;
  stop_accepting();
  s.for_each_session([](Session& x) { x.close_async(/*only_if_idle=*/false); });
  for (int i = 0; i < 100 && s.counters.connections_open > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (s.workers) s.workers->stop();
  s.work.reset();
  s.ioc.stop();
  for (auto& t : s.threads) t.join();
  s.threads.clear();
}

HttpCounters HttpServer::counters() const {
  const AtomicCounters& c = impl_->counters;
  HttpCounters r;
  r.connections_open = c.connections_open;
  r.connections_total = c.connections_total;
  r.connections_rejected = c.connections_rejected;
  r.requests_active = c.requests_active;
  r.requests_total = c.requests_total;
  r.responses_cancelled = c.responses_cancelled;
  r.timeouts = c.timeouts;
  r.requests_queued = impl_->workers ? int64_t(impl_->workers->queued()) : 0;
  r.requests_rejected_busy = c.requests_rejected_busy;
  return r;
}

}  // namespace orchid::server
