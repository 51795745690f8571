#include "http_test_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <stdexcept>

namespace orchid::server::test {

std::string RawResponse::header(const std::string& name) const {
  auto it = headers.find(name);
  return it == headers.end() ? std::string() : it->second;
}

TestConnection::TestConnection(int port) {
  fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd_ < 0 || ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0)
    throw std::runtime_error("test client: cannot connect");
}

TestConnection::~TestConnection() {
  close();
}

void TestConnection::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void TestConnection::shutdown_write() {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_WR);
}

void TestConnection::reset() {
  if (fd_ < 0) return;
  linger l{1, 0};  // close with RST instead of FIN: a client that is gone, not one that is done sending
  ::setsockopt(fd_, SOL_SOCKET, SO_LINGER, &l, sizeof l);
  close();
}

void TestConnection::send(const std::string& bytes) {
  size_t off = 0;
  while (off < bytes.size()) {
    const ssize_t n = ::send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
    if (n <= 0) throw std::runtime_error("test client: send failed");
    off += size_t(n);
  }
}

bool TestConnection::fill(std::chrono::steady_clock::time_point deadline) {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  if (left.count() <= 0) return false;
  pollfd p{fd_, POLLIN, 0};
  if (::poll(&p, 1, int(left.count())) <= 0) return false;
  char tmp[16384];
  const ssize_t n = ::recv(fd_, tmp, sizeof tmp, 0);
  if (n <= 0) return false;
  buf_.append(tmp, size_t(n));
  return true;
}

std::optional<RawResponse> TestConnection::read_response(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  RawResponse r;
  std::string head;
  for (;;) {  // interim 1xx responses are skipped, as HTTP/1.1 clients must
    size_t head_end;
    while ((head_end = buf_.find("\r\n\r\n")) == std::string::npos)
      if (!fill(deadline)) return std::nullopt;
    head = buf_.substr(0, head_end);
    buf_.erase(0, head_end + 4);
    r.status = std::stoi(head.substr(9, 3));
    if (r.status >= 200 || r.status == 101) break;
    ++r.interim;
  }
  size_t pos = head.find("\r\n");
  while (pos != std::string::npos && pos + 2 < head.size()) {
    const size_t next = head.find("\r\n", pos + 2);
    const std::string line =
        head.substr(pos + 2, next == std::string::npos ? std::string::npos : next - pos - 2);
    const size_t colon = line.find(':');
    if (colon != std::string::npos) {
      std::string name = line.substr(0, colon);
      std::transform(name.begin(), name.end(), name.begin(),
                     [](unsigned char c) { return char(std::tolower(c)); });
      std::string value = line.substr(colon + 1);
      value.erase(0, value.find_first_not_of(' '));
      r.headers[name] = value;
    }
    pos = next;
  }
  if (r.header("transfer-encoding") == "chunked") {
    for (;;) {
      size_t eol;
      while ((eol = buf_.find("\r\n")) == std::string::npos)
        if (!fill(deadline)) return std::nullopt;
      const size_t size = std::stoul(buf_.substr(0, eol), nullptr, 16);
      while (buf_.size() < eol + 2 + size + 2)
        if (!fill(deadline)) return std::nullopt;
      r.body += buf_.substr(eol + 2, size);
      buf_.erase(0, eol + 2 + size + 2);
      if (size == 0) return r;
    }
  }
  if (!r.header("content-length").empty()) {
    const size_t len = std::stoul(r.header("content-length"));
    while (buf_.size() < len)
      if (!fill(deadline)) return std::nullopt;
    r.body = buf_.substr(0, len);
    buf_.erase(0, len);
    return r;
  }
  while (fill(deadline)) {
  }
  r.body = std::move(buf_);
  buf_.clear();
  return r;
}

std::string TestConnection::read_some(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (fill(deadline)) {
  }
  std::string out = std::move(buf_);
  buf_.clear();
  return out;
}

bool TestConnection::closed_by_peer(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, int(left.count())) <= 0) return false;
    char tmp[4096];
    const ssize_t n = ::recv(fd_, tmp, sizeof tmp, 0);
    if (n <= 0) return true;
    buf_.append(tmp, size_t(n));
  }
}

RawResponse http_request(int port, const std::string& method, const std::string& path,
                         const std::string& body, const std::string& extra_headers) {
  TestConnection c(port);
  c.send(method + " " + path + " HTTP/1.1\r\nHost: test\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\n" + extra_headers + "\r\n" + body);
  auto r = c.read_response();
  if (!r) throw std::runtime_error("test client: no response to " + method + " " + path);
  return *r;
}

}  // namespace orchid::server::test
