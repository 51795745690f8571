// Collectives among the ranks of one parallel group (model/parallel.h says what each rank holds). Every rank
// calls the same collectives in the same order with the same sizes. Sums are taken in rank order on every
// rank, so all ranks end with bitwise the same result: replicated state (the residual stream) stays
// identical across ranks, as with NCCL's deterministic ring on one node.
//
// Implementations: in-process (threads of one process: the CPU backend's ranks, tests), TCP between
// processes (runtime/tcp_communicator.h), and NCCL on GPUs.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <vector>

namespace orchid::runtime {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // data[i] = sum over ranks r = 0, 1, ... of data_r[i], in place.
  virtual void all_reduce_sum(float* data, size_t count) = 0;
  // recv = send_0 | send_1 | ... (each `bytes` long), on every rank.
  virtual void all_gather(const void* send, size_t bytes, void* recv) = 0;
  // data = data_root on every rank.
  virtual void broadcast(void* data, size_t bytes, int root) = 0;
  virtual void barrier() = 0;

  // Variable counts (data-parallel replicas sharing the experts' ranks: each rank brings its own tokens).
  // `bytes` (or `counts`) is the same list on every rank, one entry per rank, e.g. from all_gather_counts.
  // recv = send_0 | send_1 | ... on every rank, send_r being bytes[r] long (zero allowed).
  virtual void all_gather_v(const void* send, std::span<const size_t> bytes, void* recv);
  // send holds sum(counts) floats on every rank, segment q (counts[q] floats, segments in rank order) meant
  // for rank q. recv (counts[rank()] floats) = sum over ranks r = 0, 1, ... of segment rank() of send_r, in
  // rank order: the same bits as the all-reduce's element of that segment.
  virtual void reduce_scatter_v(const float* send, std::span<const size_t> counts, float* recv);
  // Every rank's `mine`, in rank order (an all_gather of one integer).
  std::vector<size_t> all_gather_counts(size_t mine);
};

// One rank alone: every collective is the identity.
class SoloCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void all_reduce_sum(float*, size_t) override {}
  void all_gather(const void* send, size_t bytes, void* recv) override;
  void broadcast(void*, size_t, int) override {}
  void barrier() override {}
  void all_gather_v(const void* send, std::span<const size_t> bytes, void* recv) override;
  void reduce_scatter_v(const float* send, std::span<const size_t> counts, float* recv) override;
};

// `size` communicators for `size` threads of this process, rank i at index i. A rank that fails calls
// abort() on its communicator: every rank waiting in (or later entering) a collective of the group then
// throws orchid::InternalError instead of waiting forever.
class LocalCommunicator : public Communicator {
 public:
  virtual void abort() = 0;
};
std::vector<std::unique_ptr<LocalCommunicator>> make_local_group(int size);

}  // namespace orchid::runtime
