// Scalar formats used by gpt-oss checkpoints and orchid's kernels, with exact host conversions.
// These are the references the CUDA conversions are tested against.
//   bf16      : 1-8-7, round-to-nearest-even from fp32, NaN kept quiet.
//   fp8 e4m3fn: 1-4-3, bias 7, no infinities, max 448, one NaN pattern (S.1111.111); encode saturates to
//               +-448 like CUDA's __NV_SATFINITE, rounds to nearest even.
//   e8m0      : the MX scale, 2^(b-127); 255 is NaN.
//   e2m1      : the MXFP4 element, {0, .5, 1, 1.5, 2, 3, 4, 6} with a sign bit (bit 3).
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <string_view>

namespace orchid {

enum class DType : uint8_t {
  kF32,
  kF16,
  kBF16,
  kF8E4M3,
  kU8,
  kI8,
  kI16,
  kI32,
  kI64,
  kU16,
  kU32,
  kU64,
  kF64,
  kBool
};

// Bytes per element (all supported dtypes are whole bytes).
size_t dtype_size(DType t);
std::string_view dtype_name(DType t);  // safetensors spelling: "F32", "BF16", "F8_E4M3", "U8", ...
// Parses the safetensors spelling; returns false for an unknown name.
bool parse_dtype(std::string_view name, DType* out);

// ---- bf16 ----
inline float bf16_to_float(uint16_t b) {
  return std::bit_cast<float>(uint32_t(b) << 16);
}
inline uint16_t float_to_bf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // NaN stays NaN (quiet)
  uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);                          // ties to even
  return uint16_t((u + rounding) >> 16);
}
inline float round_to_bf16(float f) {
  return bf16_to_float(float_to_bf16(f));
}

// ---- fp8 e4m3fn ----
float fp8e4m3_to_float(uint8_t b);
uint8_t float_to_fp8e4m3(float f);  // saturating, round to nearest even
constexpr float kFp8E4M3Max = 448.0f;

// ---- e8m0 (MX block scale) ----
inline float e8m0_to_float(uint8_t b) {
  if (b == 0xff) return std::nanf("");
  return std::ldexp(1.0f, int(b) - 127);
}

// ---- e2m1 (MXFP4 element) ----
inline float e2m1_to_float(uint8_t nibble) {
  static constexpr float kValues[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                        -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
  return kValues[nibble & 0xf];
}
uint8_t float_to_e2m1(float f);  // saturating to +-6, round to nearest even

}  // namespace orchid
