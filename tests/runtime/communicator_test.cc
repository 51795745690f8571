// The in-process communicator: sums in rank order (bitwise equal on every rank, equal to a sequential sum),
// gathers in rank order, broadcasts from any root, many collectives back to back, and a failing rank that
// releases the others instead of hanging them.
#include "runtime/communicator.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <thread>

#include "core/error.h"

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
