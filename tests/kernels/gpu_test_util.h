// Helpers for kernel tests: device buffers, random bf16 data, the GPU-present check, and a comparison that
// reports what a single remote run needs to diagnose a failure (max abs/rel error, relative L2, NaN or
// unwritten count, first bad index and where it is).
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/dtypes.h"
#include "kernels/common/cuda_check.h"

namespace orchid::testing {

inline bool gpu_available() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

// Without a GPU the test is skipped, unless ORCHID_REQUIRE_GPU is set (the GPU scripts set it), which turns
// the skip into a failure so that a run on the GPU machine cannot pass by skipping.
#define ORCHID_REQUIRE_GPU_OR_SKIP()                                     \
  do {                                                                   \
    if (!::orchid::testing::gpu_available()) {                           \
      if (std::getenv("ORCHID_REQUIRE_GPU") != nullptr) {                \
        FAIL() << "no CUDA device, and ORCHID_REQUIRE_GPU is set";       \
      }                                                                  \
      GTEST_SKIP() << "no CUDA device (set ORCHID_REQUIRE_GPU to fail)"; \
    }                                                                    \
  } while (0)

// Seed for a test's random inputs: ORCHID_TEST_SEED if set, else fresh from the OS. Tests print it
// (SCOPED_TRACE) so a failure can be replayed.
inline uint64_t test_seed() {
  if (const char* s = std::getenv("ORCHID_TEST_SEED")) return std::strtoull(s, nullptr, 10);
  std::random_device rd;
  return (uint64_t(rd()) << 32) ^ rd();
}

template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t n) { resize(n); }
  explicit DeviceBuffer(const std::vector<T>& host) { upload(host); }
  ~DeviceBuffer() { release(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}

  void resize(size_t n) {
    release();
    n_ = n;
    if (n > 0) ORCHID_CUDA_CHECK(cudaMalloc(&p_, n * sizeof(T)));
  }
  void upload(const std::vector<T>& h) {
    if (h.size() != n_) resize(h.size());
    if (n_ > 0) ORCHID_CUDA_CHECK(cudaMemcpy(p_, h.data(), n_ * sizeof(T), cudaMemcpyHostToDevice));
  }
  std::vector<T> download() const {
    std::vector<T> h(n_);
    if (n_ > 0) ORCHID_CUDA_CHECK(cudaMemcpy(h.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
  }
  T* get() const { return p_; }
  size_t size() const { return n_; }

 private:
  void release() {
    if (p_ != nullptr) cudaFree(p_);
    p_ = nullptr;
    n_ = 0;
  }
  T* p_ = nullptr;
  size_t n_ = 0;
};

// A bf16 NaN pattern used to poison outputs; kernels produce only the canonical NaN, so an element still
// holding it after a launch was not written.
inline constexpr uint16_t kPoisonBf16 = 0xffff;
// The e4m3 (fp8 e4m3fn) NaN pattern: unused pages of an FP8 KV cache, so that reading them shows up.
inline constexpr uint8_t kPoisonFp8 = 0x7f;

inline std::vector<uint16_t> random_bf16(std::mt19937_64& rng, size_t n, float stddev, float mean = 0.0f) {
  std::normal_distribution<float> dist(mean, stddev);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = float_to_bf16(dist(rng));
  return v;
}

inline std::vector<float> bf16_to_floats(const std::vector<uint16_t>& v) {
  std::vector<float> f(v.size());
  for (size_t i = 0; i < v.size(); ++i) f[i] = bf16_to_float(v[i]);
  return f;
}

struct Comparison {
  size_t count = 0;    // elements compared
  size_t bad = 0;      // outside atol + rtol * |ref|, NaN, or unwritten
  size_t nan = 0;      // NaN (includes the poison pattern: unwritten)
  double max_abs = 0;  // max |got - ref|
  double max_rel = 0;  // max |got - ref| / max(|ref|, atol)
  double rel_l2 = 0;   // ||got - ref|| / ||ref||
  int64_t first_bad = -1;
  std::string first_bad_text;

  bool ok(double max_rel_l2) const { return bad == 0 && nan == 0 && rel_l2 <= max_rel_l2; }
  std::string summary() const {
    std::ostringstream s;
    s << "compared " << count << ": bad " << bad << ", NaN/unwritten " << nan << ", max_abs " << max_abs
      << ", max_rel " << max_rel << ", rel_l2 " << rel_l2;
    if (first_bad >= 0) s << "; first bad #" << first_bad << " " << first_bad_text;
    return s.str();
  }
};

// Compares got[i] with ref[i] for every i where `selected(i)` (all if empty). `where(i)` names an index
// (e.g. "token 3 head 5 dim 17") in the report.
inline Comparison compare(const std::vector<float>& got, const std::vector<double>& ref, double atol,
                          double rtol, const std::function<bool(size_t)>& selected = {},
                          const std::function<std::string(size_t)>& where = {}) {
  Comparison c;
  double err2 = 0, ref2 = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (selected && !selected(i)) continue;
    ++c.count;
    const double g = got[i], r = ref[i];
    const double d = std::fabs(g - r);
    const bool is_nan = std::isnan(g);
    if (is_nan) ++c.nan;
    if (!is_nan) {
      err2 += d * d;
      c.max_abs = std::max(c.max_abs, d);
      c.max_rel = std::max(c.max_rel, d / std::max(std::fabs(r), atol));
    }
    ref2 += r * r;
    if (is_nan || d > atol + rtol * std::fabs(r)) {
      if (c.bad++ == 0) {
        c.first_bad = int64_t(i);
        std::ostringstream s;
        s << (where ? where(i) : std::string()) << " got " << g << " want " << r;
        c.first_bad_text = s.str();
      }
    }
  }
  c.rel_l2 = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  return c;
}

}  // namespace orchid::testing
