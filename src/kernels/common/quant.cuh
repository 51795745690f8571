// Device-side scalar conversions shared by the quantizing kernels. They follow the host references in
// core/dtypes.h bit for bit (tests check every code): fp8 e4m3fn encode = round to nearest even, saturate
// to +-448 (__NV_SATFINITE); bf16 encode = round to nearest even.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cstdint>

namespace orchid::kernels {

constexpr float kFp8Max = 448.0f;

__device__ __forceinline__ uint8_t fp8_from_float(float v) {
  return uint8_t(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3));
}

// Four floats -> four e4m3 bytes, first value in the lowest byte.
__device__ __forceinline__ uint32_t fp8x4_from_float(float a, float b, float c, float d) {
  const uint32_t lo = __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, __NV_E4M3);
  const uint32_t hi = __nv_cvt_float2_to_fp8x2(make_float2(c, d), __NV_SATFINITE, __NV_E4M3);
  return lo | (hi << 16);
}

__device__ __forceinline__ float fp8_to_float(uint8_t b) {
  __half_raw h = __nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t(b), __NV_E4M3);
  return __half2float(__half(h));
}

// The 1x128 activation-group rule (the CPU reference in tests mirrors it exactly):
//   amax = max |v|;  scale = amax / 448, inv = 448 / amax (IEEE divisions);  q = e4m3_satfinite(v * inv)
//   an all-zero group gets scale 1.
struct Fp8GroupScale {
  float scale, inv;
};
__device__ __forceinline__ Fp8GroupScale fp8_group_scale(float amax) {
  if (!(amax > 0.0f)) return {1.0f, 1.0f};
  return {__fdiv_rn(amax, kFp8Max), __fdiv_rn(kFp8Max, amax)};
}

// e8m0 (MX scale) as fp32: 2^(b-127); b = 0 is the subnormal 2^-127; 255 is NaN.
__device__ __forceinline__ float e8m0_to_float(uint8_t b) {
  if (b == 0) return __uint_as_float(0x00400000u);
  if (b == 0xff) return __uint_as_float(0x7fc00000u);
  return __uint_as_float(uint32_t(b) << 23);
}

// e2m1 magnitude codes 0..7 -> {0, .5, 1, 1.5, 2, 3, 4, 6}; bit 3 is the sign.
__device__ __forceinline__ float e2m1_to_float(uint32_t nibble) {
  const uint32_t mag = nibble & 7u;
  // 2^(e-1) * (1 + m/2) for e = mag>>1 >= 1; 0.5*m for e = 0.
  const float v = (mag >= 2u) ? __uint_as_float(((mag >> 1) + 126u) << 23) * (1.0f + 0.5f * float(mag & 1u))
                              : 0.5f * float(mag);
  return (nibble & 8u) ? -v : v;
}

// Eight bf16 (one 16-byte load; element 2i in the low half of word i) as floats, exactly.
__device__ __forceinline__ void bf16x8_to_float(const uint4& u, float (&f)[8]) {
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}

// Two floats -> packed bf16x2 (round to nearest even), `lo` in the low half.
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

__device__ __forceinline__ float bf16_bits_to_float(uint16_t b) {
  return __uint_as_float(uint32_t(b) << 16);
}

__device__ __forceinline__ uint16_t float_to_bf16_bits(float f) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(f));
}

}  // namespace orchid::kernels
