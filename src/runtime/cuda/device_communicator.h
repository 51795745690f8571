// Collectives of the CUDA backend's ranks on device buffers, enqueued on the caller's stream. Every rank
// calls the same collectives in the same order with the same sizes (the model's forward, written once over a
// rank's shard, decides where: cuda_rank.h). All ranks end with bitwise the same sums, so the replicated
// residual stream stays identical on every rank.
//
// Implementations:
//   solo          one rank: every collective is the identity (one GPU, the default).
//   shared device ranks that share one GPU as threads of this process (tests of the parallel code on one
//   GPU):
//                 the host synchronises the ranks' streams and exchanges pointers, and each rank sums the
//                 buffers in rank order with one kernel. Not capturable in a CUDA graph (host waits).
//   NCCL          one GPU per rank (nccl_communicator.h): the production path, capturable.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <memory>
#include <vector>

namespace orchid::runtime::cuda {

class DeviceCommunicator {
 public:
  virtual ~DeviceCommunicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // data[i] = sum over the ranks of data_r[i] (fp32), in place.
  virtual void all_reduce_sum(float* data, size_t count, cudaStream_t stream) = 0;
  // recv = send_0 | send_1 | ... (`bytes` each) on every rank; recv does not overlap send.
  virtual void all_gather(const void* send, size_t bytes, void* recv, cudaStream_t stream) = 0;
  // Whether the collectives may be captured into a CUDA graph.
  virtual bool capturable() const = 0;
  // A failing rank calls this so that the others stop waiting in (or before) a collective: they throw.
  virtual void abort() {}
};

class SoloDeviceCommunicator final : public DeviceCommunicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void all_reduce_sum(float*, size_t, cudaStream_t) override {}
  void all_gather(const void* send, size_t bytes, void* recv, cudaStream_t stream) override;
  bool capturable() const override { return true; }
};

// `size` communicators for ranks sharing the current device, rank i at index i, each used by its own thread.
std::vector<std::unique_ptr<DeviceCommunicator>> make_shared_device_group(int size);

}  // namespace orchid::runtime::cuda
