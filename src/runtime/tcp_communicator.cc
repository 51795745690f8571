#include "runtime/tcp_communicator.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <numeric>
#include <thread>
#include <vector>

#include "core/error.h"

namespace orchid::runtime {
namespace {

struct HostPort {
  std::string host, port;
};

HostPort split_addr(const std::string& addr) {
  const size_t colon = addr.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == addr.size())
    fail("--dist-init-addr '{}': expected HOST:PORT", addr);
  HostPort hp{addr.substr(0, colon), addr.substr(colon + 1)};
  if (hp.port.find_first_not_of("0123456789") != std::string::npos)
    fail("--dist-init-addr '{}': the port must be a number", addr);
  return hp;
}

class Socket {
 public:
  explicit Socket(int fd = -1) : fd_(fd) {}
  Socket(Socket&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Socket& operator=(Socket&& o) noexcept {
    std::swap(fd_, o.fd_);
    return *this;
  }
  ~Socket() {
    if (fd_ >= 0) ::close(fd_);
  }
  int fd() const { return fd_; }

  void send_all(const void* data, size_t bytes, const char* what) {
    const char* p = static_cast<const char*>(data);
    while (bytes > 0) {
      const ssize_t n = ::send(fd_, p, bytes, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0)
        fail("distributed group: sending {} failed ({}); a rank has gone", what, std::strerror(errno));
      p += n;
      bytes -= size_t(n);
    }
  }
  void recv_all(void* data, size_t bytes, const char* what) {
    char* p = static_cast<char*>(data);
    while (bytes > 0) {
      const ssize_t n = ::recv(fd_, p, bytes, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n == 0) fail("distributed group: a rank closed its connection while {} was expected", what);
      if (n < 0) fail("distributed group: receiving {} failed ({})", what, std::strerror(errno));
      p += n;
      bytes -= size_t(n);
    }
  }

 private:
  int fd_;
};

void no_delay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

addrinfo* resolve(const HostPort& hp, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (passive) hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  const int rc = ::getaddrinfo(hp.host.c_str(), hp.port.c_str(), &hints, &res);
  if (rc != 0)
    fail("--dist-init-addr {}:{}: cannot resolve the host ({})", hp.host, hp.port, gai_strerror(rc));
  return res;
}

class TcpGroup final : public Communicator {
 public:
  TcpGroup(int world, int rank) : world_(world), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return world_; }

  void form(const std::string& addr, double timeout_s) {
    const HostPort hp = split_addr(addr);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    if (rank_ == 0) {
      addrinfo* res = resolve(hp, true);
      Socket listener(::socket(res->ai_family, res->ai_socktype, res->ai_protocol));
      int one = 1;
      ::setsockopt(listener.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
      const int bound = ::bind(listener.fd(), res->ai_addr, res->ai_addrlen);
      ::freeaddrinfo(res);
      if (listener.fd() < 0 || bound != 0 || ::listen(listener.fd(), world_) != 0)
        fail("--dist-init-addr {}: rank 0 cannot listen there ({})", addr, std::strerror(errno));
      peers_.resize(size_t(world_));
      for (int joined = 1; joined < world_; ++joined) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            deadline - std::chrono::steady_clock::now());
        pollfd pfd{listener.fd(), POLLIN, 0};
        if (left.count() <= 0 || ::poll(&pfd, 1, int(left.count())) <= 0)
          fail("--dist-init-addr {}: rank 0 waited {} s and {} of the other {} ranks joined", addr, timeout_s,
               joined - 1, world_ - 1);
        Socket s(::accept(listener.fd(), nullptr, nullptr));
        if (s.fd() < 0) fail("--dist-init-addr {}: accept failed ({})", addr, std::strerror(errno));
        no_delay(s.fd());
        int32_t hello[2] = {0, 0};  // rank, world
        s.recv_all(hello, sizeof(hello), "a rank's hello");
        if (hello[1] != world_ || hello[0] <= 0 || hello[0] >= world_ || peers_[size_t(hello[0])].fd() >= 0)
          fail("--dist-init-addr {}: a process joined as rank {} of {}; this group is {} ranks", addr,
               hello[0], hello[1], world_);
        peers_[size_t(hello[0])] = std::move(s);
      }
      return;
    }
    while (true) {
      addrinfo* res = resolve(hp, false);
      Socket s(::socket(res->ai_family, res->ai_socktype, res->ai_protocol));
      const int rc = ::connect(s.fd(), res->ai_addr, res->ai_addrlen);
      ::freeaddrinfo(res);
      if (rc == 0) {
        no_delay(s.fd());
        const int32_t hello[2] = {rank_, world_};
        s.send_all(hello, sizeof(hello), "the hello");
        root_ = std::move(s);
        return;
      }
      if (std::chrono::steady_clock::now() > deadline)
        fail("--dist-init-addr {}: rank {} could not reach rank 0 within {} s ({})", addr, rank_, timeout_s,
             std::strerror(errno));
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }

  void all_reduce_sum(float* data, size_t count) override {
    if (world_ == 1) return;
    const size_t bytes = count * sizeof(float);
    if (rank_ != 0) {
      root_.send_all(data, bytes, "an all-reduce buffer");
      root_.recv_all(data, bytes, "an all-reduce result");
      return;
    }
    std::vector<float> sum(data, data + count), part(count);
    for (int r = 1; r < world_; ++r) {  // rank order: the same bits on every rank
      peers_[size_t(r)].recv_all(part.data(), bytes, "an all-reduce buffer");
      for (size_t i = 0; i < count; ++i) sum[i] += part[i];
    }
    for (int r = 1; r < world_; ++r) peers_[size_t(r)].send_all(sum.data(), bytes, "an all-reduce result");
    std::memcpy(data, sum.data(), bytes);
  }

  void all_gather(const void* send, size_t bytes, void* recv) override {
    char* out = static_cast<char*>(recv);
    if (rank_ != 0) {
      root_.send_all(send, bytes, "an all-gather part");
      root_.recv_all(out, bytes * size_t(world_), "an all-gather result");
      return;
    }
    std::memmove(out, send, bytes);
    for (int r = 1; r < world_; ++r)
      peers_[size_t(r)].recv_all(out + size_t(r) * bytes, bytes, "an all-gather part");
    for (int r = 1; r < world_; ++r)
      peers_[size_t(r)].send_all(out, bytes * size_t(world_), "an all-gather result");
  }

  void all_gather_v(const void* send, std::span<const size_t> bytes, void* recv) override {
    ORCHID_CHECK(bytes.size() == size_t(world_), "all_gather_v: {} counts for a group of {}", bytes.size(),
                 world_);
    char* out = static_cast<char*>(recv);
    const size_t total = std::accumulate(bytes.begin(), bytes.end(), size_t(0));
    if (rank_ != 0) {
      root_.send_all(send, bytes[size_t(rank_)], "an all-gather part");
      root_.recv_all(out, total, "an all-gather result");
      return;
    }
    if (bytes[0] > 0) std::memmove(out, send, bytes[0]);
    size_t at = bytes[0];
    for (int r = 1; r < world_; ++r) {
      peers_[size_t(r)].recv_all(out + at, bytes[size_t(r)], "an all-gather part");
      at += bytes[size_t(r)];
    }
    for (int r = 1; r < world_; ++r) peers_[size_t(r)].send_all(out, total, "an all-gather result");
  }

  // Rank 0 receives every rank's whole buffer, sums in rank order and sends each rank its segment.
  void reduce_scatter_v(const float* send, std::span<const size_t> counts, float* recv) override {
    ORCHID_CHECK(counts.size() == size_t(world_), "reduce_scatter_v: {} counts for a group of {}",
                 counts.size(), world_);
    const size_t total = std::accumulate(counts.begin(), counts.end(), size_t(0));
    if (rank_ != 0) {
      root_.send_all(send, total * sizeof(float), "a reduce-scatter buffer");
      root_.recv_all(recv, counts[size_t(rank_)] * sizeof(float), "a reduce-scatter result");
      return;
    }
    std::vector<float> sum(total), part(total);
    if (total > 0) std::copy_n(send, total, sum.data());
    for (int r = 1; r < world_; ++r) {  // rank order: the same bits on every rank
      peers_[size_t(r)].recv_all(part.data(), total * sizeof(float), "a reduce-scatter buffer");
      for (size_t i = 0; i < total; ++i) sum[i] += part[i];
    }
    size_t at = counts[0];
    for (int r = 1; r < world_; ++r) {
      peers_[size_t(r)].send_all(sum.data() + at, counts[size_t(r)] * sizeof(float),
                                 "a reduce-scatter result");
      at += counts[size_t(r)];
    }
    if (counts[0] > 0) std::copy_n(sum.data(), counts[0], recv);
  }

  void broadcast(void* data, size_t bytes, int root) override {
    ORCHID_CHECK(root >= 0 && root < world_, "broadcast root {}", root);
    if (world_ == 1) return;
    if (rank_ == 0) {
      if (root != 0) peers_[size_t(root)].recv_all(data, bytes, "a broadcast");
      for (int r = 1; r < world_; ++r)
        if (r != root) peers_[size_t(r)].send_all(data, bytes, "a broadcast");
      return;
    }
    if (rank_ == root)
      root_.send_all(data, bytes, "a broadcast");
    else
      root_.recv_all(data, bytes, "a broadcast");
  }

  void barrier() override {
    float x = 0.0f;
    all_reduce_sum(&x, 1);
  }

 private:
  int world_, rank_;
  std::vector<Socket> peers_;  // rank 0: one per other rank
  Socket root_;                // other ranks: the link to rank 0
};

}  // namespace

std::unique_ptr<Communicator> connect_tcp_group(const std::string& addr, int world, int rank,
                                                double timeout_s) {
  if (world < 1) fail("--nnodes must be positive, got {}", world);
  if (rank < 0 || rank >= world) fail("--node-rank {} is outside [0, {}) (--nnodes {})", rank, world, world);
  auto g = std::make_unique<TcpGroup>(world, rank);
  if (world > 1) g->form(addr, timeout_s);
  return g;
}

}  // namespace orchid::runtime
