// A POSIX shared-memory object mapped into this process: created (and unlinked at destruction) by the
// instance that exports K/V, opened read-only by the one that imports them (runtime/kv_share.h, the CPU
// backend's transport). The mapping outlives the exporter: an object unlinked or an exporter gone leaves
// the pages a receiver mapped readable until it unmaps them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace orchid::runtime {

class SharedMemory {
 public:
  SharedMemory() = default;
  // A new object `name` ("/orchid-kv-<pid>-<n>") of `bytes`, zero-filled (pages are taken as they are
  // written). Throws orchid::Error when it cannot be made.
  static SharedMemory create(const std::string& name, size_t bytes);
  // An existing object, read-only. Throws orchid::Error when it cannot be opened.
  static SharedMemory open(const std::string& name);
  SharedMemory(SharedMemory&& o) noexcept;
  SharedMemory& operator=(SharedMemory&& o) noexcept;
  SharedMemory(const SharedMemory&) = delete;
  SharedMemory& operator=(const SharedMemory&) = delete;
  ~SharedMemory();

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& name() const { return name_; }

 private:
  void reset();
  std::string name_;
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  bool owner_ = false;
};

}  // namespace orchid::runtime
