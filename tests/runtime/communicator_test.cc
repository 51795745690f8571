// The communicators. In-process: sums in rank order (bitwise equal on every rank, equal to a sequential sum),
// gathers in rank order, broadcasts from any root, many collectives back to back, and a failing rank that
// releases the others instead of hanging them. TCP: the same collectives between threads over loopback,
// and the errors of a group that cannot form. The variable-count collectives (all_gather_v,
// reduce_scatter_v) of every implementation, and of the base class's defaults, for 1, 2, 4 and 8 ranks
// with uneven counts including zero: gathers in rank order, each segment's sum bitwise the all-reduce's.
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

// Per-rank row counts for a group of n: round 0 all zero, rounds 1 and 2 uneven with zeros among them
// (n = 8, round 1: 2 3 0 1 2 3 0 1; round 2: 2 0 3 1 4 2 0 3).
std::vector<size_t> uneven_counts(int n, int round) {
  std::vector<size_t> counts;
  for (int r = 0; r < n; ++r)
    counts.push_back(round == 0 ? 0 : round == 1 ? size_t((r * 5 + 2) % 4) : size_t((r * 3 + 2) % 5));
  return counts;
}

// What rank r gathers and sends: rows of `width` floats, value (r, i) distinct everywhere.
std::vector<float> part_of(int r, size_t rows, size_t width) {
  std::vector<float> v(rows * width);
  for (size_t i = 0; i < v.size(); ++i) v[i] = float(r) * 1000.0f + float(i) * 0.5f;
  return v;
}

// One rank's side of the variable-count check: all_gather_counts, all_gather_v of its rows, then a
// reduce_scatter_v of a buffer of random floats (and all_reduce_sum of a copy, the reference bits). Fills
// `gathered`, `scattered` and `reduced` for the test to compare.
struct VarResult {
  std::vector<size_t> counts;
  std::vector<float> gathered, scattered, reduced;
};
void var_collectives(Communicator& c, const std::vector<size_t>& rows, size_t width, VarResult& out) {
  const int r = c.rank();
  out.counts = c.all_gather_counts(rows[size_t(r)]);
  std::vector<size_t> bytes, floats;
  size_t total = 0;
  for (size_t n : out.counts) {
    bytes.push_back(n * width * sizeof(float));
    floats.push_back(n * width);
    total += n * width;
  }
  const std::vector<float> mine = part_of(r, rows[size_t(r)], width);
  out.gathered.assign(total, -1.0f);
  c.all_gather_v(mine.data(), bytes, out.gathered.data());
  std::vector<float> send(total);
  std::mt19937 rng(uint32_t(100 + r));
  std::normal_distribution<float> nd;
  for (auto& v : send) v = nd(rng);
  out.reduced = send;
  c.all_reduce_sum(out.reduced.data(), total);
  out.scattered.assign(floats[size_t(r)], -1.0f);
  c.reduce_scatter_v(send.data(), floats, out.scattered.data());
}

void check_var(const std::vector<VarResult>& got, const std::vector<size_t>& rows, size_t width,
               const std::string& what) {
  const int n = int(got.size());
  std::vector<float> want_gathered;
  for (int q = 0; q < n; ++q) {
    const auto p = part_of(q, rows[size_t(q)], width);
    want_gathered.insert(want_gathered.end(), p.begin(), p.end());
  }
  size_t begin = 0;
  for (int r = 0; r < n; ++r) {
    SCOPED_TRACE(what + ", rank " + std::to_string(r) + " of " + std::to_string(n));
    EXPECT_EQ(got[size_t(r)].counts, rows);
    EXPECT_EQ(got[size_t(r)].gathered, want_gathered);
    const size_t len = rows[size_t(r)] * width;
    ASSERT_EQ(got[size_t(r)].scattered.size(), len);
    // Segment r of the all-reduce, bit for bit (sums in rank order both).
    if (len > 0) {
      EXPECT_EQ(std::memcmp(got[size_t(r)].scattered.data(), got[size_t(r)].reduced.data() + begin,
                            len * sizeof(float)),
                0);
    }
    begin += len;
  }
}

// Only the fixed-size collectives of another communicator: the base class's variable-count defaults.
class FixedOnly final : public Communicator {
 public:
  explicit FixedOnly(Communicator& c) : c_(c) {}
  int rank() const override { return c_.rank(); }
  int size() const override { return c_.size(); }
  void all_reduce_sum(float* data, size_t count) override { c_.all_reduce_sum(data, count); }
  void all_gather(const void* send, size_t bytes, void* recv) override { c_.all_gather(send, bytes, recv); }
  void broadcast(void* data, size_t bytes, int root) override { c_.broadcast(data, bytes, root); }
  void barrier() override { c_.barrier(); }

 private:
  Communicator& c_;
};

TEST(LocalCommunicator, VariableCountCollectives) {
  const size_t width = 3;
  for (int n : {1, 2, 4, 8})
    for (int round = 0; round < 3; ++round)
      for (bool defaults : {false, true}) {
        auto comms = make_local_group(n);
        const auto rows = uneven_counts(n, round);
        std::vector<VarResult> got(static_cast<size_t>(n));
        run_ranks(comms, [&](LocalCommunicator& c) {
          FixedOnly fixed(c);
          var_collectives(defaults ? static_cast<Communicator&>(fixed) : c, rows, width,
                          got[size_t(c.rank())]);
        });
        check_var(
            got, rows, width,
            std::string(defaults ? "base defaults" : "in-process") + ", round " + std::to_string(round));
      }
}

TEST(SoloCommunicator, VariableCountCollectives) {
  SoloCommunicator c;
  for (size_t rows : {size_t(0), size_t(5)}) {
    VarResult got;
    var_collectives(c, {rows}, 4, got);
    check_var({got}, {rows}, 4, "solo");
  }
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

TEST(TcpCommunicator, VariableCountCollectives) {
  const size_t width = 2;
  for (int n : {1, 2, 4, 8}) {
    const std::string addr = "127.0.0.1:" + std::to_string(free_port());
    const auto rows = uneven_counts(n, 1);
    std::vector<VarResult> got(static_cast<size_t>(n));
    std::vector<std::string> errors(static_cast<size_t>(n));
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r)
      threads.emplace_back([&, r] {
        try {
          auto c = connect_tcp_group(addr, n, r, 20.0);
          var_collectives(*c, rows, width, got[size_t(r)]);
          // A second round with every count zero: nothing moves, nobody waits.
          VarResult empty;
          var_collectives(*c, std::vector<size_t>(size_t(n), 0), width, empty);
          EXPECT_TRUE(empty.gathered.empty() && empty.scattered.empty());
        } catch (const std::exception& e) {
          errors[size_t(r)] = e.what();
        }
      });
    for (auto& t : threads) t.join();
    for (int r = 0; r < n; ++r) EXPECT_EQ(errors[size_t(r)], "") << "rank " << r << " of " << n;
    check_var(got, rows, width, "tcp");
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
