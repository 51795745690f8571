// A blocking HTTP/1.1 client over a raw socket, for server tests that need control over bytes on the wire
// (partial requests, pipelining, closing mid-response).
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>

namespace orchid::server::test {

struct RawResponse {
  int status = 0;
  std::map<std::string, std::string> headers;  // names in lower case
  std::string body;                            // de-chunked
  int interim = 0;                             // 1xx responses that came before
  std::string header(const std::string& name) const;
};

class TestConnection {
 public:
  explicit TestConnection(int port);
  ~TestConnection();
  TestConnection(const TestConnection&) = delete;
  TestConnection& operator=(const TestConnection&) = delete;

  void send(const std::string& bytes);
  // Reads one response (Content-Length, chunked, or until close). nullopt if the server closed first or
  // nothing complete arrived within `timeout`.
  std::optional<RawResponse> read_response(std::chrono::milliseconds timeout = std::chrono::seconds(10));
  // Reads the head and then whatever body bytes arrive within `timeout` (no de-chunking): for streams.
  std::string read_some(std::chrono::milliseconds timeout);
  // True once the server has closed the connection (reads EOF) within `timeout`.
  bool closed_by_peer(std::chrono::milliseconds timeout);
  void close();
  // shutdown(SHUT_WR): the request is complete, nothing more will be sent; the reading side stays open.
  void shutdown_write();
  // Closes with a TCP reset, as a client that crashed or aborted does.
  void reset();

 private:
  bool fill(std::chrono::steady_clock::time_point deadline);  // false on EOF/timeout
  int fd_ = -1;
  std::string buf_;
};

// One request on a fresh connection.
RawResponse http_request(int port, const std::string& method, const std::string& path,
                         const std::string& body = {}, const std::string& extra_headers = {});

}  // namespace orchid::server::test
