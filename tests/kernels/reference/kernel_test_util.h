// Helpers for the GPU kernel tests: device buffers, poisoning, random inputs with a printed seed, and a
// comparison that prints one diagnostic line per check (max abs/rel error, relative L2, first bad index,
// NaN/unwritten count), so a single remote run tells what is wrong.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "core/dtypes.h"

namespace orchid::testing {

#define ORCHID_TEST_CUDA(expr)                                             \
  do {                                                                     \
    cudaError_t e_ = (expr);                                               \
    ASSERT_EQ(e_, cudaSuccess) << #expr << ": " << cudaGetErrorString(e_); \
  } while (0)

// Skips the test where no CUDA device is visible (CPU-only build machines run the binary's listing only).
#define ORCHID_REQUIRE_GPU()                                                         \
  do {                                                                               \
    int n_ = 0;                                                                      \
    if (cudaGetDeviceCount(&n_) != cudaSuccess || n_ == 0) GTEST_SKIP() << "no GPU"; \
  } while (0)

template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t count) { resize(count); }
  ~DeviceBuffer() {
    if (ptr_) cudaFree(ptr_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void resize(size_t count) {
    if (ptr_) cudaFree(ptr_);
    ptr_ = nullptr;
    count_ = count;
    if (count && cudaMalloc(&ptr_, count * sizeof(T)) != cudaSuccess) {
      std::fprintf(stderr, "cudaMalloc of %zu bytes failed\n", count * sizeof(T));
      std::abort();
    }
  }
  T* get() const { return ptr_; }
  size_t size() const { return count_; }
  size_t bytes() const { return count_ * sizeof(T); }
  void upload(const std::vector<T>& v) {
    resize(v.size());
    if (!v.empty() && cudaMemcpy(ptr_, v.data(), bytes(), cudaMemcpyHostToDevice) != cudaSuccess)
      std::abort();
  }
  std::vector<T> download() const {
    std::vector<T> v(count_);
    if (count_ && cudaMemcpy(v.data(), ptr_, bytes(), cudaMemcpyDeviceToHost) != cudaSuccess) std::abort();
    return v;
  }
  // 0xFF bytes: NaN for bf16/fp32/e4m3, -1 for ints -- an unwritten output cannot pass a check.
  void poison() {
    if (count_ && cudaMemset(ptr_, 0xff, bytes()) != cudaSuccess) std::abort();
  }

 private:
  T* ptr_ = nullptr;
  size_t count_ = 0;
};

// A fresh seed per run unless ORCHID_TEST_SEED is set; printed so a failure can be replayed.
inline uint64_t test_seed(const char* what) {
  static const uint64_t base = [] {
    const char* env = std::getenv("ORCHID_TEST_SEED");
    return env ? std::strtoull(env, nullptr, 10) : uint64_t(std::random_device{}());
  }();
  uint64_t h = base;
  for (const char* p = what; *p; ++p) h = h * 1099511628211ull ^ uint64_t(uint8_t(*p));
  std::printf("[seed] %s: ORCHID_TEST_SEED=%llu\n", what, (unsigned long long)base);
  return h;
}

inline std::vector<uint16_t> random_bf16(std::mt19937_64& rng, size_t n, float scale) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = float_to_bf16(d(rng));
  return v;
}

inline std::vector<float> bf16_to_floats(const std::vector<uint16_t>& v) {
  std::vector<float> f(v.size());
  for (size_t i = 0; i < v.size(); ++i) f[i] = bf16_to_float(v[i]);
  return f;
}

struct CompareStats {
  double max_abs = 0, max_rel = 0, rel_l2 = 0;
  int64_t first_bad = -1, bad = 0, nan = 0;
};

// Element i passes when |got - ref| <= atol + rtol * |ref|; the whole check also needs rel_l2 <= l2_tol and
// no NaN (a NaN is an unwritten poisoned element or a real NaN). Prints one line either way.
inline bool compare(const char* name, const std::vector<float>& got, const std::vector<double>& ref,
                    double atol, double rtol, double l2_tol, CompareStats* out = nullptr) {
  CompareStats s;
  double num = 0, den = 0;
  if (got.size() != ref.size()) {
    std::printf("[check] %s: size mismatch %zu vs %zu\n", name, got.size(), ref.size());
    return false;
  }
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], r = ref[i];
    if (std::isnan(g) || std::isnan(r)) {
      ++s.nan;
      if (s.first_bad < 0) s.first_bad = int64_t(i);
      continue;
    }
    const double d = std::fabs(g - r);
    num += d * d;
    den += r * r;
    s.max_abs = std::max(s.max_abs, d);
    if (std::fabs(r) > 0) s.max_rel = std::max(s.max_rel, d / std::fabs(r));
    if (d > atol + rtol * std::fabs(r)) {
      ++s.bad;
      if (s.first_bad < 0) s.first_bad = int64_t(i);
    }
  }
  s.rel_l2 = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  const bool ok = s.nan == 0 && s.bad == 0 && s.rel_l2 <= l2_tol;
  std::printf("[check] %-44s %s n=%zu max_abs=%.3g max_rel=%.3g rel_l2=%.3g bad=%lld nan=%lld", name,
              ok ? "ok  " : "FAIL", got.size(), s.max_abs, s.max_rel, s.rel_l2, (long long)s.bad,
              (long long)s.nan);
  if (s.first_bad >= 0)
    std::printf(" first_bad=%lld (got %.6g, ref %.6g)", (long long)s.first_bad,
                double(got[size_t(s.first_bad)]), ref[size_t(s.first_bad)]);
  std::printf("\n");
  if (out) *out = s;
  return ok;
}

// Exact comparison of integer or byte arrays, with the first mismatch printed.
template <typename T>
bool compare_exact(const char* name, const std::vector<T>& got, const std::vector<T>& ref) {
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

}  // namespace orchid::testing
