// A typed, shaped view of bytes owned elsewhere (a mapped checkpoint file or an in-memory buffer).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtypes.h"

namespace orchid::io {

struct TensorView {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  size_t nbytes = 0;
  std::string source;  // file (or "synthetic:...") it comes from, for messages

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  template <typename T>
  const T* as() const {
    return reinterpret_cast<const T*>(data);
  }
};

std::string shape_str(const std::vector<int64_t>& shape);  // "[2880, 4096]"

}  // namespace orchid::io
