// Additions to tests/kernels/gpu_test_util.h for the GEMM and MoE kernel tests: poisoning device buffers,
// named seeds, and checks that print one diagnostic line each (so a single remote run tells what is wrong).
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/kernels/gpu_test_util.h"

namespace orchid::testing {

#define ORCHID_TEST_CUDA(expr)                                             \
  do {                                                                     \
    cudaError_t e_ = (expr);                                               \
    ASSERT_EQ(e_, cudaSuccess) << #expr << ": " << cudaGetErrorString(e_); \
  } while (0)

// Root mean square of a reference (the scale of a tolerance).
inline double rms_of(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x * x;
  return std::sqrt(s / double(std::max<size_t>(1, v.size())));
}

// 0xFF bytes: NaN for bf16/fp32/e4m3, -1 for ints -- an unwritten output cannot pass a check.
template <typename T>
void poison(DeviceBuffer<T>& b) {
  if (b.size() > 0) ORCHID_CUDA_CHECK(cudaMemset(b.get(), 0xff, b.size() * sizeof(T)));
}

// test_seed() mixed with the case name; the base seed is printed so a failure can be replayed with
// ORCHID_TEST_SEED.
inline uint64_t named_seed(const char* what) {
  static const uint64_t base = test_seed();
  uint64_t h = base;
  for (const char* p = what; *p; ++p) h = h * 1099511628211ull ^ uint64_t(uint8_t(*p));
  std::printf("[seed] %s: ORCHID_TEST_SEED=%llu\n", what, (unsigned long long)base);
  return h;
}

// Element i passes when |got - ref| <= atol + rtol * |ref|; the whole check also needs rel_l2 <= l2_tol and
// no NaN (a NaN is an unwritten poisoned element or a real NaN). Prints one line either way.
inline bool check_close(const char* name, const std::vector<float>& got, const std::vector<double>& ref,
                        double atol, double rtol, double l2_tol) {
  if (got.size() != ref.size()) {
    std::printf("[check] %s: size mismatch %zu vs %zu\n", name, got.size(), ref.size());
    return false;
  }
  const Comparison c = compare(got, ref, atol, rtol);
  const bool ok = c.ok(l2_tol);
  std::printf("[check] %-44s %s %s\n", name, ok ? "ok  " : "FAIL", c.summary().c_str());
  return ok;
}

// Exact comparison of integer or byte arrays, with the first mismatch printed.
template <typename T>
bool check_exact(const char* name, const std::vector<T>& got, const std::vector<T>& ref) {
  int64_t bad = 0, first = -1;
  const size_t n = std::min(got.size(), ref.size());
  for (size_t i = 0; i < n; ++i)
    if (got[i] != ref[i]) {
      if (first < 0) first = int64_t(i);
      ++bad;
    }
  const bool ok = bad == 0 && got.size() == ref.size();
  std::printf("[check] %-44s %s n=%zu mismatches=%lld", name, ok ? "ok  " : "FAIL", got.size(),
              (long long)bad);
  if (first >= 0)
    std::printf(" first=%lld (got %lld, ref %lld)", (long long)first, (long long)got[size_t(first)],
                (long long)ref[size_t(first)]);
  std::printf("\n");
  return ok;
}

// Rows of 16-bit values in the tiled MXFP4 GEMM's order -> natural order: in each block of 32 columns,
// element e sits at position `pos(e)` (mxfp4_tiled_pos).
template <class Pos>
std::vector<uint16_t> from_block_order(const std::vector<uint16_t>& v, size_t cols, Pos pos) {
  if (cols % 32 != 0) throw std::invalid_argument("from_block_order: rows of whole 32-column blocks");
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const size_t row = i / cols, col = i % cols, block = col & ~size_t(31);
    out[i] = v[row * cols + block + size_t(pos(int(col & 31)))];
  }
  return out;
}

}  // namespace orchid::testing
