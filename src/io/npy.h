// NumPy .npy files (format version 1.0), little-endian float32/int32/int64, C order.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace orchid::io {

void write_npy_f32(const std::string& path, const float* data, const std::vector<int64_t>& shape);

struct NpyArray {
  std::string descr;  // "<f4", "<i4", "<i8"
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
  std::vector<float> as_f32() const;    // for "<f4"
  std::vector<int64_t> as_i64() const;  // for integer arrays
};
NpyArray read_npy(const std::string& path);

}  // namespace orchid::io
