#include "runtime/cpu/cpu_linear.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/thread_pool.h"
#include "model/mxfp4.h"

namespace orchid::runtime::cpu {

namespace {
float element_f32(DType t, const uint8_t* p, int64_t i) {
  switch (t) {
    case DType::kF32: {
      float v;
      std::memcpy(&v, p + 4 * i, 4);
      return v;
    }
    case DType::kBF16: {
      uint16_t b;
      std::memcpy(&b, p + 2 * i, 2);
      return bf16_to_float(b);
    }
    case DType::kF16: {
      uint16_t h;
      std::memcpy(&h, p + 2 * i, 2);
      // IEEE half -> float
      uint32_t sign = uint32_t(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
      float v;
      if (exp == 0)
        v = std::ldexp(float(man), -24);
      else if (exp == 31)
        v = man ? std::nanf("") : INFINITY;
      else
        v = std::ldexp(float(man | 0x400), int(exp) - 25);
      return sign ? -v : v;
    }
    default:
      ORCHID_CHECK(false, "dtype {} is not a float type", dtype_name(t));
  }
}
}  // namespace

MatrixRef MatrixRef::dense(const io::TensorView& t, int64_t index) {
  MatrixRef m;
  m.format = Format::kDense;
  m.dtype = t.dtype;
  const size_t nd = t.shape.size();
  ORCHID_CHECK(nd >= 2);
  m.rows = t.shape[nd - 2];
  m.cols = t.shape[nd - 1];
  m.data = t.data + size_t(index) * size_t(m.rows * m.cols) * dtype_size(t.dtype);
  return m;
}

MatrixRef MatrixRef::mxfp4(const io::TensorView& blocks, const io::TensorView& scales, int64_t index) {
  // blocks [N, rows, cols/32, 16], scales [N, rows, cols/32]
  MatrixRef m;
  m.format = Format::kMxfp4;
  m.rows = blocks.shape[1];
  m.cols = blocks.shape[2] * model::kMxfp4Group;
  const size_t groups = size_t(blocks.shape[2]);
  m.data = blocks.data + size_t(index) * size_t(m.rows) * groups * 16;
  m.scales = scales.data + size_t(index) * size_t(m.rows) * groups;
  return m;
}

MatrixRef MatrixRef::row_slice(int64_t r0, int64_t r1) const {
  ORCHID_CHECK(r0 >= 0 && r0 <= r1 && r1 <= rows, "row slice [{}, {}) of {} rows", r0, r1, rows);
  MatrixRef m = *this;
  m.rows = r1 - r0;
  if (format == Format::kMxfp4) {
    const size_t groups = size_t(cols / model::kMxfp4Group);
    m.data = data + size_t(r0) * groups * 16;
    m.scales = scales + size_t(r0) * groups;
  } else {
    m.data = data + size_t(r0) * size_t(row_stride ? row_stride : cols) * dtype_size(dtype);
  }
  return m;
}

MatrixRef MatrixRef::col_slice(int64_t c0, int64_t c1) const {
  ORCHID_CHECK(format == Format::kDense, "column slices of MXFP4 matrices are not supported");
  ORCHID_CHECK(c0 >= 0 && c0 <= c1 && c1 <= cols, "column slice [{}, {}) of {} columns", c0, c1, cols);
  MatrixRef m = *this;
  m.row_stride = row_stride ? row_stride : cols;
  m.cols = c1 - c0;
  m.data = data + size_t(c0) * dtype_size(dtype);
  return m;
}

void MatrixRef::rows_f32(int64_t r0, int64_t r1, float* out) const {
  if (format == Format::kMxfp4) {
    model::dequantize_mxfp4_rows(data, scales, cols, r0, r1, out);
    return;
  }
  const int64_t stride = row_stride ? row_stride : cols;
  const size_t es = dtype_size(dtype);
  if (stride != cols) {  // a column slice: row by row
    for (int64_t r = r0; r < r1; ++r) {
      const uint8_t* base = data + size_t(r * stride) * es;
      float* o = out + (r - r0) * cols;
      if (dtype == DType::kF32)
        std::memcpy(o, base, size_t(cols) * 4);
      else
        for (int64_t i = 0; i < cols; ++i) o[i] = element_f32(dtype, base, i);
    }
    return;
  }
  if (dtype == DType::kF32) {
    std::memcpy(out, data + size_t(r0 * cols) * 4, size_t((r1 - r0) * cols) * 4);
    return;
  }
  const uint8_t* base = data + size_t(r0 * cols) * es;
  for (int64_t i = 0; i < (r1 - r0) * cols; ++i) out[i] = element_f32(dtype, base, i);
}

std::vector<float> to_f32(const io::TensorView& t, int64_t index, int64_t count) {
  if (count < 0) count = t.numel();
  std::vector<float> v(static_cast<size_t>(count));
  const uint8_t* base = t.data + size_t(index * count) * dtype_size(t.dtype);
  for (int64_t i = 0; i < count; ++i) v[size_t(i)] = element_f32(t.dtype, base, i);
  return v;
}

void linear(const float* x, int64_t n, const MatrixRef& w, const float* bias, float* y) {
  if (n == 0) return;
  const int64_t K = w.cols, N = w.rows;
  // Rows of W are dequantized in blocks and reused for every token: the weight is read once per call.
  constexpr int64_t kRowBlock = 16;
  const int64_t blocks = (N + kRowBlock - 1) / kRowBlock;
  ThreadPool::global().parallel_for(size_t(blocks), 1, [&](size_t b0, size_t b1) {
    std::vector<float> wrows(size_t(kRowBlock * K));
    for (size_t b = b0; b < b1; ++b) {
      const int64_t r0 = int64_t(b) * kRowBlock, r1 = std::min(N, r0 + kRowBlock);
      w.rows_f32(r0, r1, wrows.data());
      for (int64_t t = 0; t < n; ++t) {
        const float* xt = x + t * K;
        for (int64_t r = r0; r < r1; ++r) {
          const float* wr = wrows.data() + (r - r0) * K;
          float acc0 = 0, acc1 = 0, acc2 = 0, acc3 = 0;
          int64_t k = 0;
          for (; k + 4 <= K; k += 4) {
            acc0 += xt[k] * wr[k];
            acc1 += xt[k + 1] * wr[k + 1];
            acc2 += xt[k + 2] * wr[k + 2];
            acc3 += xt[k + 3] * wr[k + 3];
          }
          for (; k < K; ++k) acc0 += xt[k] * wr[k];
          y[t * N + r] = (acc0 + acc1) + (acc2 + acc3) + (bias ? bias[r] : 0.0f);
        }
      }
    }
  });
}

}  // namespace orchid::runtime::cpu
