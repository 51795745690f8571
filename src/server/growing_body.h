// A Beast body type for requests whose memory grows with the bytes that actually arrive. Beast's
// string_body reserves the declared Content-Length before a byte of the body is read, so every
// connection that merely declares a body under the limit costs that much memory (71 of them ran a
// server out of address space); and an allocation failure there would throw out of an I/O thread.
// Here a failed allocation becomes the error `not_enough_memory` for that one request.
//
// Private to http_server.cc: the rest of the server never sees Beast.
#pragma once

#include <boost/asio/buffer.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/optional.hpp>
#include <boost/system/error_code.hpp>

#include <cstdint>
#include <new>
#include <string>

namespace orchid::server {

struct GrowingBody {
  using value_type = std::string;

  class reader {
   public:
    template <bool isRequest, class Fields>
    reader(boost::beast::http::header<isRequest, Fields>&, value_type& body) : body_(body) {}

    // The declared length is not trusted with memory: the parser's body limit already checked it.
    void init(const boost::optional<std::uint64_t>&, boost::beast::error_code& ec) { ec = {}; }

    template <class ConstBufferSequence>
    std::size_t put(const ConstBufferSequence& buffers, boost::beast::error_code& ec) {
      const std::size_t n = boost::asio::buffer_size(buffers);
      const std::size_t old = body_.size();
      try {
        body_.resize(old + n);  // grows geometrically: amortized copies stay linear in the body
      } catch (const std::bad_alloc&) {
        ec = make_error_code(boost::system::errc::not_enough_memory);
        return 0;
      } catch (const std::length_error&) {
        ec = make_error_code(boost::system::errc::not_enough_memory);
        return 0;
      }
      boost::asio::buffer_copy(boost::asio::buffer(body_.data() + old, n), buffers);
      ec = {};
      return n;
    }

    void finish(boost::beast::error_code& ec) { ec = {}; }

   private:
    value_type& body_;
  };
};

}  // namespace orchid::server
