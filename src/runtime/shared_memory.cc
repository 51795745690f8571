#include "runtime/shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "core/error.h"

namespace orchid::runtime {

SharedMemory SharedMemory::create(const std::string& name, size_t bytes) {
  const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) fail("shared memory {}: {}", name, std::strerror(errno));
  if (::ftruncate(fd, off_t(bytes)) != 0) {
    const int err = errno;
    ::close(fd);
    ::shm_unlink(name.c_str());
    fail("shared memory {} of {} bytes: {}", name, bytes, std::strerror(err));
  }
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int err = errno;
  ::close(fd);
  if (p == MAP_FAILED) {
    ::shm_unlink(name.c_str());
    fail("shared memory {}: mapping {} bytes: {}", name, bytes, std::strerror(err));
  }
  SharedMemory m;
  m.name_ = name;
  m.data_ = static_cast<uint8_t*>(p);
  m.size_ = bytes;
  m.owner_ = true;
  return m;
}

SharedMemory SharedMemory::open(const std::string& name) {
  if (name.empty() || name[0] != '/' || name.find('/', 1) != std::string::npos)
    fail("shared memory: '{}' is not an object name", name);
  const int fd = ::shm_open(name.c_str(), O_RDONLY, 0);
  if (fd < 0) fail("shared memory {}: {}", name, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || st.st_size <= 0) {
    ::close(fd);
    fail("shared memory {}: no size", name);
  }
  void* p = ::mmap(nullptr, size_t(st.st_size), PROT_READ, MAP_SHARED, fd, 0);
  const int err = errno;
  ::close(fd);
  if (p == MAP_FAILED) fail("shared memory {}: mapping: {}", name, std::strerror(err));
  SharedMemory m;
  m.name_ = name;
  m.data_ = static_cast<uint8_t*>(p);
  m.size_ = size_t(st.st_size);
  return m;
}

SharedMemory::SharedMemory(SharedMemory&& o) noexcept
    : name_(std::move(o.name_)), data_(o.data_), size_(o.size_), owner_(o.owner_) {
  o.data_ = nullptr;
  o.size_ = 0;
  o.owner_ = false;
}

SharedMemory& SharedMemory::operator=(SharedMemory&& o) noexcept {
  if (this != &o) {
    reset();
    name_ = std::move(o.name_);
    data_ = o.data_;
    size_ = o.size_;
    owner_ = o.owner_;
    o.data_ = nullptr;
    o.size_ = 0;
    o.owner_ = false;
  }
  return *this;
}

SharedMemory::~SharedMemory() {
  reset();
}

void SharedMemory::reset() {
  if (data_ != nullptr) ::munmap(data_, size_);
  if (owner_) ::shm_unlink(name_.c_str());
  data_ = nullptr;
  size_ = 0;
  owner_ = false;
}

}  // namespace orchid::runtime
