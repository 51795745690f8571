#include "runtime/cuda/device_memory.h"

#include <utility>

#include "core/error.h"
#include "kernels/common/cuda_check.h"

namespace orchid::runtime::cuda {

DeviceBuffer::DeviceBuffer(size_t bytes, const std::string& what) : bytes_(bytes) {
  if (bytes == 0) return;
  void* p = nullptr;
  const cudaError_t err = cudaMalloc(&p, bytes);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error state of a failed allocation
    size_t free = 0, total = 0;
    cudaMemGetInfo(&free, &total);
    fail("cannot allocate {:.2f} GiB of GPU memory for {} ({:.2f} GiB free of {:.2f}): {}",
         double(bytes) / (1 << 30), what, double(free) / (1 << 30), double(total) / (1 << 30),
         cudaGetErrorString(err));
  }
  ptr_ = static_cast<uint8_t*>(p);
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_) cudaFree(ptr_);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept
    : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (ptr_) cudaFree(ptr_);
    ptr_ = std::exchange(o.ptr_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

uint8_t* DeviceArena::take_bytes(size_t bytes) {
  const size_t aligned = arena_bytes(bytes);
  ORCHID_CHECK(used_ + aligned <= buf_.size(), "arena '{}' overflow: {} + {} > {}", what_, used_, aligned,
               buf_.size());
  uint8_t* p = buf_.data() + used_;
  used_ += aligned;
  return p;
}

DeviceMemoryInfo device_memory_info() {
  DeviceMemoryInfo m;
  ORCHID_CUDA_CHECK(cudaMemGetInfo(&m.free, &m.total));
  return m;
}

}  // namespace orchid::runtime::cuda
