// One HTTP/1.1 request to another server and its response, the whole exchange (connecting, writing,
// reading) within one deadline: a decode instance's calls to its prefill instances and the load generator's
// side requests. A stream's deadline covers asynchronous operations only, so the exchange runs on them (in a
// private io_context) and a peer that accepts the connection and then hangs costs the deadline, not forever.
#pragma once

#include <chrono>
#include <cstdint>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "server/http_url.h"

namespace orchid::server {

// Throws boost::system::system_error on any failure, the deadline (beast::error::timeout) included, and
// for a body over `body_limit` bytes.
template <class Body>
boost::beast::http::response<boost::beast::http::string_body> http_exchange(
    const HttpUrl& url, boost::beast::http::request<Body>& req, std::chrono::milliseconds timeout,
    uint64_t body_limit) {
  namespace beast = boost::beast;
  namespace http = beast::http;
  boost::asio::io_context io;
  boost::asio::ip::tcp::resolver resolver(io);
  beast::tcp_stream stream(io);
  beast::flat_buffer buf;
  http::response_parser<http::string_body> parser;
  parser.body_limit(body_limit);
  beast::error_code error;
  const auto endpoints = resolver.resolve(url.host, url.port);
  stream.expires_after(timeout);
  stream.async_connect(endpoints, [&](beast::error_code ec, const boost::asio::ip::tcp::endpoint&) {
    if (ec) {
      error = ec;
      return;
    }
    http::async_write(stream, req, [&](beast::error_code ec, size_t) {
      if (ec) {
        error = ec;
        return;
      }
      http::async_read(stream, buf, parser, [&](beast::error_code ec, size_t) { error = ec; });
    });
  });
  io.run();
  if (error) throw beast::system_error(error);
  return parser.release();
}

}  // namespace orchid::server
