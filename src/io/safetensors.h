// safetensors: reading (mmap, validated headers) and writing.
// File layout: u64 little-endian header length N, N bytes of JSON {name: {dtype, shape, data_offsets:[b,e]},
// "__metadata__": {str: str}}, then the data section; offsets are relative to the data section.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "io/mapped_file.h"
#include "io/tensor_view.h"

namespace orchid::io {

struct TensorEntry {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte span in the data section
};

struct SafetensorsHeader {
  std::vector<TensorEntry> tensors;  // in file order of their data
  std::map<std::string, std::string> metadata;
  uint64_t data_offset = 0;  // 8 + header length
};

// Largest header accepted (the reference implementation's limit is 100 MB).
inline constexpr uint64_t kMaxSafetensorsHeader = 100ull << 20;

// Validates everything about a file's first bytes without touching tensor data: the length prefix, the JSON,
// every dtype/shape/offset, shape x dtype size == span, spans inside the file and not overlapping.
// `file_size` is the whole file's size; `bytes` holds at least its first min(file_size, 8 + N) bytes.
// Errors are orchid::Error naming `file` (and the tensor).
SafetensorsHeader parse_safetensors(std::string_view bytes, uint64_t file_size, std::string_view file);

// One mapped .safetensors file.
class SafetensorsFile {
 public:
  static std::unique_ptr<SafetensorsFile> open(const std::string& path);
  const SafetensorsHeader& header() const { return header_; }
  TensorView view(const TensorEntry& e) const;
  const std::shared_ptr<MappedFile>& file() const { return file_; }

 private:
  std::shared_ptr<MappedFile> file_;
  SafetensorsHeader header_;
};

struct TensorToWrite {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  const void*
      data;  // numel * dtype_size bytes; nullptr leaves a hole (a sparse file region reading as zeros)
};

// Writes a file in the layout above (header padded with spaces to a multiple of 8, as the reference does).
void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// Streaming variant for files larger than memory: `produce(i, buffer)` fills tensor i's bytes (buffer is
// sized numel * dtype_size) just before it is written. TensorToWrite::data is ignored.
void write_safetensors_streaming(const std::string& path, const std::vector<TensorToWrite>& tensors,
                                 const std::function<void(size_t, uint8_t*)>& produce,
                                 const std::map<std::string, std::string>& metadata = {});

}  // namespace orchid::io
