// The unnormalized probability of a token under temperature sampling, exp((logit - max_logit) / T), computed
// bit-identically by the host sampler and the GPU sampler, so that both keep the same top-p and min-p
// candidates and draw the same token from the same uniform.
//
// Library exp differs between glibc and CUDA by an ulp or so, which would move a top-p boundary or an
// inverse-CDF bucket now and then. Here every step is one IEEE-rounded float operation with no fused
// multiply-add (on the device through the _rn intrinsics, which the compiler never contracts; host files that
// include this are built with -ffp-contract=off), so both sides round identically:
//   x = (logit - max) * inv_t            (<= 0)
//   t = x * log2(e);  n = floor(t + 0.5);  f = t - n  (exact: n is the integer nearest t)
//   2^f by its Taylor series to degree 7 on |f| <= 1/2 (truncation error < 6e-9, rounding ~1e-7), times 2^n.
// Weights below 2^-125 are 0 (a token that unlikely is never kept by any practical top-p/min-p).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define ORCHID_SW_HD __host__ __device__
#else
#define ORCHID_SW_HD
#endif

namespace orchid {

namespace sampling_weight_detail {
#if defined(__CUDA_ARCH__)
__device__ inline float mul(float a, float b) {
  return __fmul_rn(a, b);
}
__device__ inline float add(float a, float b) {
  return __fadd_rn(a, b);
}
__device__ inline float sub(float a, float b) {
  return __fsub_rn(a, b);
}
__device__ inline float pow2i(int n) {
  return __int_as_float((n + 127) << 23);
}
#else
inline float mul(float a, float b) {
  return a * b;
}
inline float add(float a, float b) {
  return a + b;
}
inline float sub(float a, float b) {
  return a - b;
}
inline float pow2i(int n) {
  const uint32_t bits = uint32_t(n + 127) << 23;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
#endif
}  // namespace sampling_weight_detail

ORCHID_SW_HD inline float sampling_weight(float logit, float max_logit, float inv_temperature) {
  namespace d = sampling_weight_detail;
  const float x = d::mul(d::sub(logit, max_logit), inv_temperature);
  const float t = d::mul(x, 1.44269504f);  // log2(e)
  if (!(t >= -125.0f)) return 0.0f;        // also -inf and NaN
  const float n = floorf(d::add(t, 0.5f));
  const float f = d::sub(t, n);
  // (ln 2)^k / k!, k = 7 .. 0
  float p = 1.52527338e-5f;
  p = d::add(d::mul(p, f), 1.54035304e-4f);
  p = d::add(d::mul(p, f), 1.33335581e-3f);
  p = d::add(d::mul(p, f), 9.61812911e-3f);
  p = d::add(d::mul(p, f), 5.55041087e-2f);
  p = d::add(d::mul(p, f), 2.40226507e-1f);
  p = d::add(d::mul(p, f), 6.93147182e-1f);
  p = d::add(d::mul(p, f), 1.0f);
  return d::mul(p, d::pow2i(int(n)));
}

}  // namespace orchid
