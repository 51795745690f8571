// A read-only memory-mapped file. Checkpoints are read through the page cache: opening one costs only the
// header parse, and the OS reads weights in as they are touched.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace orchid::io {

class MappedFile {
 public:
  // Throws orchid::Error naming the path if it cannot be opened or mapped.
  static std::shared_ptr<MappedFile> open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile() = default;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

}  // namespace orchid::io
