// Weights as the CPU backend reads them: views into the checkpoint in their stored format, dequantized to
// fp32 one block of rows at a time inside the matmul (so a 20b checkpoint runs from its mmap, not from 80 GB
// of fp32 copies).
#pragma once

#include <cstdint>
#include <vector>

#include "core/dtypes.h"
#include "io/tensor_view.h"

namespace orchid::runtime::cpu {

// A [rows, cols] matrix (rows = outputs): dense BF16/F16/F32 rows, or MXFP4 blocks + scales.
struct MatrixRef {
  enum class Format : uint8_t { kDense, kMxfp4 } format = Format::kDense;
  DType dtype = DType::kF32;        // dense element type
  const uint8_t* data = nullptr;    // dense elements, or MXFP4 blocks
  const uint8_t* scales = nullptr;  // MXFP4 only
  int64_t rows = 0, cols = 0;
  int64_t row_stride = 0;  // dense: elements from one row's start to the next (0: cols)

  static MatrixRef dense(const io::TensorView& t, int64_t index = 0);  // index: slice of a stacked [N, r, c]
  static MatrixRef mxfp4(const io::TensorView& blocks, const io::TensorView& scales, int64_t index);
  // Views of rows [r0, r1) (any format) and of columns [c0, c1) (dense), for a rank's shard.
  MatrixRef row_slice(int64_t r0, int64_t r1) const;
  MatrixRef col_slice(int64_t c0, int64_t c1) const;
  // Rows [r0, r1) as fp32 into out[(r - r0) * cols].
  void rows_f32(int64_t r0, int64_t r1, float* out) const;
};

// A vector (bias, norm weight, sinks) converted to fp32 once at load.
std::vector<float> to_f32(const io::TensorView& t, int64_t index = 0, int64_t count = -1);

// y[n, rows] = x[n, cols] . W^T (+ bias), fp32, parallel over output rows.
void linear(const float* x, int64_t n, const MatrixRef& w, const float* bias, float* y);

}  // namespace orchid::runtime::cpu
