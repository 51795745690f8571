// HttpServer on Boost.Beast/Asio (header-only, so the binary needs no HTTP library at run time).
//
// One io_context run by a few threads; every connection is a Session on its own strand, so its handlers never
// run concurrently. While a response is being produced the session keeps a one-byte read pending on the
// socket: EOF or a reset completes it at once, which is how a vanished client cancels its request within an
// engine step instead of at its next write. Timeouts use one deadline timer per session.
#include "server/http_server.h"

#include <spdlog/spdlog.h>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <atomic>
#include <cctype>
#include <cstring>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_set>

#include "core/error.h"

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

struct AtomicCounters {
  std::atomic<int64_t> connections_open{0}, connections_total{0}, connections_rejected{0};
  std::atomic<int64_t> requests_active{0}, requests_total{0}, responses_cancelled{0}, timeouts{0};
};

class Session;

struct ServerState {
  HttpServerOptions options;
  HttpServer::Handler handler;
  HttpServer::ErrorFormatter errors;
  net::io_context ioc;
  std::optional<tcp::acceptor> acceptor;
  std::vector<std::thread> threads;
  std::atomic<bool> draining{false};
  int bound_port = 0;
  AtomicCounters counters;
  std::mutex sessions_mu;
  std::unordered_set<Session*> sessions;
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work;

  void accept();
  template <typename F>
  void for_each_session(F f);
};

std::string chunk_frame(std::string_view data) {
  if (data.empty()) return {};
  return fmt::format("{:x}\r\n", data.size()) + std::string(data) + "\r\n";
}

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, ServerState* server)
      : socket_(std::move(socket)), timer_(socket_.get_executor()), server_(server) {
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

  void arm(std::chrono::milliseconds d) {
    const uint64_t gen = ++timer_gen_;
    timer_.expires_after(d);
    timer_.async_wait([self = shared_from_this(), gen](beast::error_code ec) {
      if (ec || gen != self->timer_gen_) return;
      ++self->server_->counters.timeouts;
      self->close();
    });
  }
  void disarm() {
    ++timer_gen_;
    timer_.cancel();
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    cancel_stream();
    disarm();
    beast::error_code ec;
    socket_.shutdown(tcp::socket::shutdown_both, ec);
    socket_.close(ec);
  }

  void read_request(bool first) {
    if (closed_) return;
    if (server_->draining && !first) return close();
    parser_.emplace();
    parser_->body_limit(opt().max_body_bytes);
    parser_->header_limit(uint32_t(opt().max_header_bytes));
    arm(first ? opt().request_timeout : opt().idle_timeout);
    http::async_read_header(
        socket_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, size_t) { self->on_header(ec); });
  }

  void on_header(beast::error_code ec) {
    if (ec) return on_read_error(ec);
    arm(opt().request_timeout);
    auto& req = parser_->get();
    if (beast::iequals(req[http::field::expect], "100-continue")) {
      out_ = "HTTP/1.1 100 Continue\r\n\r\n";
      net::async_write(socket_, net::buffer(out_), [self = shared_from_this()](beast::error_code ec, size_t) {
        if (ec) return self->close();
        self->read_body();
      });
      return;
    }
    read_body();
  }

  void read_body() {
    http::async_read(socket_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code ec, size_t) { self->on_request(ec); });
  }

  void on_read_error(beast::error_code ec) {
    if (ec == http::error::end_of_stream || ec == net::error::eof || ec == net::error::operation_aborted ||
        ec == net::error::connection_reset || closed_)
      return close();
    // The request itself is bad: answer, then close (the stream position is unknown).
    int status = 400;
    std::string message = fmt::format("malformed HTTP request: {}", ec.message());
    if (ec == http::error::body_limit) {
      status = 413;
      message = fmt::format("request body is larger than the limit of {} bytes", opt().max_body_bytes);
    } else if (ec == http::error::header_limit) {
      status = 431;
      message = fmt::format("request headers are larger than the limit of {} bytes", opt().max_header_bytes);
    }
    request_open_ = true;
    ++server_->counters.requests_active;
    ++server_->counters.requests_total;
    write_response(server_->errors(status, message), /*keep_alive=*/false, /*version=*/11);
  }

  void on_request(beast::error_code ec) {
    if (ec) return on_read_error(ec);
    auto& req = parser_->get();
    HttpRequest r;
    r.method = std::string(req.method_string());
    const std::string_view target = req.target();
    const size_t q = target.find('?');
    r.path = std::string(target.substr(0, q));
    if (q != std::string_view::npos) r.query = std::string(target.substr(q + 1));
    for (const auto& f : req) {
      std::string name(f.name_string());
      for (char& c : name) c = char(std::tolower(static_cast<unsigned char>(c)));
      r.headers.emplace_back(std::move(name), std::string(f.value()));
    }
    r.body = std::move(req.body());
    version_ = req.version();
    keep_alive_ = req.keep_alive();
    parser_.reset();
    request_open_ = true;
    ++server_->counters.requests_active;
    ++server_->counters.requests_total;
    disarm();

    HttpResponse res;
    try {
      res = server_->handler(r);
    } catch (const std::exception& e) {
      spdlog::error("http: handler for {} {}: {}", r.method, r.path, e.what());
      res = server_->errors(500, "internal error while handling the request");
    }
    if (res.stream) return start_stream(std::move(res));
    write_response(std::move(res), keep_alive_, version_);
  }

  void write_response(HttpResponse res, bool keep_alive, unsigned version) {
    keep_alive = keep_alive && !server_->draining;
    auto msg = std::make_shared<http::response<http::string_body>>(http::status(res.status), version);
    msg->set(http::field::server, "orchid");
    msg->set(http::field::content_type, res.content_type);
    for (auto& [k, v] : res.headers) msg->set(k, v);
    msg->body() = std::move(res.body);
    msg->keep_alive(keep_alive);
    msg->prepare_payload();
    arm(opt().write_timeout);
    http::async_write(socket_, *msg,
                      [self = shared_from_this(), msg, keep_alive](beast::error_code ec, size_t) {
                        self->end_request();
                        if (ec || !keep_alive) return self->close();
                        self->read_request(/*first=*/false);
                      });
  }

  void end_request() {
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
        net::post(self->socket_.get_executor(), [self] {
          self->wake_flag_->store(false);
          self->pump();
        });
    };
    watch_disconnect();
    stream_->start(wake);
    pump();
  }

  void watch_disconnect() {
    if (probing_) return;
    probing_ = true;
    socket_.async_read_some(net::buffer(probe_), [self = shared_from_this()](beast::error_code ec, size_t n) {
      self->on_probe(ec, n);
    });
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
    if (stream_) {
      if (!ec) return watch_disconnect();
      ++server_->counters.responses_cancelled;  // the client went away
      return close();
    }
    if (next_after_probe_) {  // the response is complete and the probe was cancelled to read the next request
      next_after_probe_ = false;
      if (!ec || ec == net::error::operation_aborted) return read_request(/*first=*/false);
      return close();
    }
    // The final write is still in flight; the next read sees an EOF or reset again.
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
      full = server_->errors(500, "internal error while producing the response");
      p = ResponseStream::Pull::kDone;
    }
    if (p == ResponseStream::Pull::kPending && pending_out_.empty()) return;
    if (!chunked_) {
      if (p != ResponseStream::Pull::kDone) return;
      finish_stream_state();
      return write_response_after_stream(std::move(full));
    }
    std::string out = std::move(pending_out_);
    pending_out_.clear();
    out += use_chunks_ ? chunk_frame(body) : body;
    const bool done = p == ResponseStream::Pull::kDone;
    if (done && use_chunks_) out += "0\r\n\r\n";
    if (done) finish_stream_state();
    out_ = std::move(out);
    writing_ = true;
    arm(opt().write_timeout);
    net::async_write(socket_, net::buffer(out_),
                     [self = shared_from_this(), done](beast::error_code ec, size_t) {
                       self->writing_ = false;
                       if (ec) {
                         if (self->stream_) ++self->server_->counters.responses_cancelled;
                         return self->close();
                       }
                       if (!done) {
                         self->disarm();
                         return self->pump();
                       }
                       self->end_request();
                       if (!self->keep_alive_) return self->close();
                       self->next_request_after_stream();
                     });
  }

  void finish_stream_state() {
    stream_done_ = true;
    stream_.reset();
  }

  void write_response_after_stream(HttpResponse res) {
    // The disconnect probe may still be pending; the response write can run alongside it.
    const bool keep_alive = keep_alive_ && !server_->draining;
    auto msg = std::make_shared<http::response<http::string_body>>(http::status(res.status), version_);
    msg->set(http::field::server, "orchid");
    msg->set(http::field::content_type, res.content_type);
    for (auto& [k, v] : res.headers) msg->set(k, v);
    msg->body() = std::move(res.body);
    msg->keep_alive(keep_alive);
    msg->prepare_payload();
    writing_ = true;
    arm(opt().write_timeout);
    http::async_write(socket_, *msg,
                      [self = shared_from_this(), msg, keep_alive](beast::error_code ec, size_t) {
                        self->writing_ = false;
                        self->end_request();
                        if (ec || !keep_alive) return self->close();
                        self->next_request_after_stream();
                      });
  }

  void next_request_after_stream() {
    if (probing_) {
      // Cancel the pending probe read; its handler starts the next request.
      next_after_probe_ = true;
      beast::error_code ec;
      socket_.cancel(ec);
      return;
    }
    read_request(/*first=*/false);
  }

  void cancel_stream() {
    if (stream_ && !stream_done_) {
      auto s = std::move(stream_);
      stream_.reset();
      s->cancel();
    }
  }

  tcp::socket socket_;
  net::steady_timer timer_;
  uint64_t timer_gen_ = 0;
  ServerState* server_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  unsigned version_ = 11;
  bool keep_alive_ = true;
  bool request_open_ = false;
  bool closed_ = false;
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
    if (counters.connections_open >= options.max_connections) {
      ++counters.connections_rejected;
      beast::error_code ignored;
      socket.close(ignored);
    } else {
      beast::error_code ignored;
      socket.set_option(tcp::no_delay(true), ignored);
      std::make_shared<Session>(std::move(socket), this)->start();
    }
    accept();
  });
}

}  // namespace

struct HttpServer::Impl : ServerState {};

HttpServer::HttpServer(HttpServerOptions options, Handler handler, ErrorFormatter errors)
    : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  impl_->handler = std::move(handler);
  impl_->errors = std::move(errors);
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
  s.work.emplace(s.ioc.get_executor());
  s.accept();
  for (int i = 0; i < std::max(1, s.options.threads); ++i) s.threads.emplace_back([&s] { s.ioc.run(); });
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
  return r;
}

}  // namespace orchid::server
