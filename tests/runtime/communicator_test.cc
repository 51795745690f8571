// The communicators. In-process: sums in rank order (bitwise equal on every rank, equal to a sequential sum),
// gathers in rank order, broadcasts from any root, many collectives back to back, and a failing rank that
// releases the others instead of hanging them. TCP: the same collectives between threads over loopback,
// and the errors of a group that cannot form.
#include "runtime/communicator.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <thread>

#include "core/error.h"
#include "runtime/tcp_communicator.h"

namespace orchid::runtime {
namespace {

template <typename Fn>
void run_ranks(std::vector<std::unique_ptr<LocalCommunicator>>& comms, Fn fn) {
  std::vector<std::thread> threads;
  for (auto& c : comms) threads.emplace_back([&, comm = c.get()] { fn(*comm); });
  for (auto& t : threads) t.join();
}

TEST(LocalCommunicator, AllReduceAllGatherBroadcast) {
  for (int n : {1, 2, 3, 4, 8}) {
    auto comms = make_local_group(n);
    const size_t count = 1001;  // not a multiple of anything
    const size_t ranks = static_cast<size_t>(n);
    std::vector<std::vector<float>> data(ranks, std::vector<float>(count));
    std::mt19937 rng(static_cast<uint32_t>(n));
    std::normal_distribution<float> nd;
    for (auto& d : data)
      for (auto& v : d) v = nd(rng);
    std::vector<float> want(count, 0.0f);
    for (int r = 0; r < n; ++r)
      for (size_t i = 0; i < count; ++i) want[i] += data[size_t(r)][i];
    std::vector<std::vector<int>> gathered(ranks, std::vector<int>(3 * ranks));
    std::vector<std::vector<double>> bcast(ranks, std::vector<double>(5));
    run_ranks(comms, [&](Communicator& c) {
      const int r = c.rank();
      EXPECT_EQ(c.size(), n);
      for (int round = 0; round < 20; ++round) c.barrier();
      c.all_reduce_sum(data[size_t(r)].data(), count);
      const int mine[3] = {r, 10 * r, 100 * r};
      c.all_gather(mine, sizeof(mine), gathered[size_t(r)].data());
      for (int i = 0; i < 5; ++i) bcast[size_t(r)][size_t(i)] = r == n - 1 ? 3.5 * i : -1.0;
      c.broadcast(bcast[size_t(r)].data(), 5 * sizeof(double), n - 1);
    });
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(std::memcmp(data[size_t(r)].data(), want.data(), count * 4), 0)
          << "rank " << r << " of " << n;
      for (int q = 0; q < n; ++q) {
        EXPECT_EQ(gathered[size_t(r)][size_t(3 * q)], q);
        EXPECT_EQ(gathered[size_t(r)][size_t(3 * q + 2)], 100 * q);
      }
      for (int i = 0; i < 5; ++i) EXPECT_EQ(bcast[size_t(r)][size_t(i)], 3.5 * i);
    }
  }
}

TEST(LocalCommunicator, FailingRankReleasesTheOthers) {
  auto comms = make_local_group(4);
  std::vector<int> threw(4, 0);
  run_ranks(comms, [&](LocalCommunicator& c) {
    try {
      c.barrier();
      if (c.rank() == 2) {
        c.abort();  // as a rank does when its step throws
        return;
      }
      float x = 1.0f;
      c.all_reduce_sum(&x, 1);
    } catch (const InternalError&) {
      threw[size_t(c.rank())] = 1;
    }
  });
  EXPECT_EQ(threw, (std::vector<int>{1, 1, 0, 1}));
}

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

TEST(TcpCommunicator, CollectivesOverLoopback) {
  const int n = 3;
  const std::string addr = "127.0.0.1:" + std::to_string(free_port());
  std::vector<std::vector<float>> sums(n);
  std::vector<std::vector<int>> gathered(n);
  std::vector<int> bcast(n, -1);
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        auto c = connect_tcp_group(addr, n, r, 20.0);
        std::vector<float> v = {float(r) + 0.25f, 1.0f, -float(r)};
        c->all_reduce_sum(v.data(), v.size());
        sums[size_t(r)] = v;
        const int mine = 10 + r;
        gathered[size_t(r)].resize(n);
        c->all_gather(&mine, sizeof(mine), gathered[size_t(r)].data());
        int b = r == 2 ? 42 : 0;  // a root that is not rank 0
        c->broadcast(&b, sizeof(b), 2);
        bcast[size_t(r)] = b;
        c->barrier();
      } catch (const std::exception& e) {
        errors[size_t(r)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(errors[size_t(r)], "") << "rank " << r;
    EXPECT_EQ(sums[size_t(r)], (std::vector<float>{3.75f, 3.0f, -3.0f}));
    EXPECT_EQ(gathered[size_t(r)], (std::vector<int>{10, 11, 12}));
    EXPECT_EQ(bcast[size_t(r)], 42);
  }
}

TEST(TcpCommunicator, ClearErrors) {
  EXPECT_THROW(connect_tcp_group("no-port", 2, 1, 0.1), Error);
  EXPECT_THROW(connect_tcp_group("127.0.0.1:1", 2, 2, 0.1), Error);
  // Nobody listens: rank 1 gives up after its timeout with a message naming the address.
  try {
    connect_tcp_group("127.0.0.1:" + std::to_string(free_port()), 2, 1, 0.3);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("could not reach rank 0"), std::string::npos) << e.what();
  }
  // Rank 0 alone: it waits for the others until its timeout.
  try {
    connect_tcp_group("127.0.0.1:" + std::to_string(free_port()), 2, 0, 0.3);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("0 of the other 1 ranks joined"), std::string::npos) << e.what();
  }
}

TEST(SoloCommunicator, IsTheIdentity) {
  SoloCommunicator c;
  float x[3] = {1, 2, 3};
  c.all_reduce_sum(x, 3);
  EXPECT_EQ(x[2], 3.0f);
  int g[2];
  const int s[2] = {7, 8};
  c.all_gather(s, sizeof(s), g);
  EXPECT_EQ(g[1], 8);
}

}  // namespace
}  // namespace orchid::runtime
