#include "runtime/cuda/device_communicator.h"

#include <cstdint>

#include "core/error.h"
#include "kernels/common/cuda_check.h"
#include "kernels/ops/ops.h"
#include "runtime/communicator.h"
#include "runtime/cuda/device_memory.h"

namespace orchid::runtime::cuda {

void SoloDeviceCommunicator::all_gather(const void* send, size_t bytes, void* recv, cudaStream_t stream) {
  if (bytes > 0) ORCHID_CUDA_CHECK(cudaMemcpyAsync(recv, send, bytes, cudaMemcpyDeviceToDevice, stream));
}

namespace {

// A rank of a group sharing one device. The host group (runtime/communicator.h) is the rendezvous: it
// exchanges the device pointers and is the barrier; its abort() releases the other ranks.
class SharedDeviceRank final : public DeviceCommunicator {
 public:
  explicit SharedDeviceRank(std::unique_ptr<LocalCommunicator> host) : host_(std::move(host)) {}
  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  bool capturable() const override { return false; }
  void abort() override { host_->abort(); }

  void all_reduce_sum(float* data, size_t count, cudaStream_t stream) override {
    if (size() == 1 || count == 0) return;
    ORCHID_CHECK(size() <= kernels::ops::kMaxSumBuffers, "a shared-device group has at most {} ranks",
                 kernels::ops::kMaxSumBuffers);
    const std::vector<uintptr_t> all = exchange(data, stream);
    if (scratch_.size() < count * sizeof(float)) scratch_ = DeviceBuffer(count * sizeof(float), "all-reduce");
    kernels::ops::SumSources src{};
    for (int r = 0; r < size(); ++r) src.p[r] = reinterpret_cast<const float*>(all[size_t(r)]);
    float* sum = reinterpret_cast<float*>(scratch_.data());
    kernels::ops::sum_f32(src, size(), int64_t(count), sum, stream);
    ORCHID_CUDA_CHECK(cudaStreamSynchronize(stream));
    host_->barrier();  // every rank has read every buffer
    ORCHID_CUDA_CHECK(cudaMemcpyAsync(data, sum, count * sizeof(float), cudaMemcpyDeviceToDevice, stream));
  }

  void all_gather(const void* send, size_t bytes, void* recv, cudaStream_t stream) override {
    const std::vector<uintptr_t> all = exchange(send, stream);
    for (int r = 0; r < size(); ++r)
      ORCHID_CUDA_CHECK(cudaMemcpyAsync(static_cast<uint8_t*>(recv) + size_t(r) * bytes,
                                        reinterpret_cast<const void*>(all[size_t(r)]), bytes,
                                        cudaMemcpyDeviceToDevice, stream));
    ORCHID_CUDA_CHECK(cudaStreamSynchronize(stream));
    host_->barrier();  // nobody's send buffer changes before everybody has copied it
  }

 private:
  // Waits for this rank's work so far, then publishes `p` and learns every rank's.
  std::vector<uintptr_t> exchange(const void* p, cudaStream_t stream) {
    ORCHID_CUDA_CHECK(cudaStreamSynchronize(stream));
    const uintptr_t mine = reinterpret_cast<uintptr_t>(p);
    std::vector<uintptr_t> all(static_cast<size_t>(size()));
    host_->all_gather(&mine, sizeof(mine), all.data());
    return all;
  }

  std::unique_ptr<LocalCommunicator> host_;
  DeviceBuffer scratch_;
};

}  // namespace

std::vector<std::unique_ptr<DeviceCommunicator>> make_shared_device_group(int size) {
  std::vector<std::unique_ptr<DeviceCommunicator>> out;
  for (auto& host : make_local_group(size))
    out.push_back(std::make_unique<SharedDeviceRank>(std::move(host)));
  return out;
}

}  // namespace orchid::runtime::cuda
