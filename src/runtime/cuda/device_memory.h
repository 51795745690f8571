// Device memory for the CUDA backend: one allocation per purpose (weights, KV pool, workspace), carved by a
// bump arena, so a step never calls cudaMalloc and the memory plan is visible in one place.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace orchid::runtime::cuda {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes, const std::string& what);  // throws orchid::Error with the sizes if OOM
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  uint8_t* data() const { return ptr_; }
  size_t size() const { return bytes_; }

 private:
  uint8_t* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Hands out 256-byte aligned slices of one DeviceBuffer.
class DeviceArena {
 public:
  DeviceArena() = default;
  DeviceArena(size_t bytes, const std::string& what) : buf_(bytes, what), what_(what) {}
  template <typename T>
  T* take(size_t count) {
    return reinterpret_cast<T*>(take_bytes(count * sizeof(T)));
  }
  uint8_t* take_bytes(size_t bytes);
  size_t used() const { return used_; }
  size_t capacity() const { return buf_.size(); }

 private:
  DeviceBuffer buf_;
  size_t used_ = 0;
  std::string what_;
};

// Bytes a DeviceArena needs for these takes (same alignment rule).
inline size_t arena_bytes(size_t bytes) {
  return (bytes + 255) / 256 * 256;
}

struct DeviceMemoryInfo {
  size_t free = 0, total = 0;
};
DeviceMemoryInfo device_memory_info();

}  // namespace orchid::runtime::cuda
