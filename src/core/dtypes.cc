#include "core/dtypes.h"

#include <array>

namespace orchid {

namespace {
struct DTypeInfo {
  DType type;
  std::string_view name;
  size_t size;
};
constexpr std::array<DTypeInfo, 14> kDTypes = {{
    {DType::kF32, "F32", 4},
    {DType::kF16, "F16", 2},
    {DType::kBF16, "BF16", 2},
    {DType::kF8E4M3, "F8_E4M3", 1},
    {DType::kU8, "U8", 1},
    {DType::kI8, "I8", 1},
    {DType::kI16, "I16", 2},
    {DType::kI32, "I32", 4},
    {DType::kI64, "I64", 8},
    {DType::kU16, "U16", 2},
    {DType::kU32, "U32", 4},
    {DType::kU64, "U64", 8},
    {DType::kF64, "F64", 8},
    {DType::kBool, "BOOL", 1},
}};
}  // namespace

size_t dtype_size(DType t) {
  return kDTypes[size_t(t)].size;
}
std::string_view dtype_name(DType t) {
  return kDTypes[size_t(t)].name;
}

bool parse_dtype(std::string_view name, DType* out) {
  for (const auto& d : kDTypes) {
    if (d.name == name) {
      *out = d.type;
      return true;
    }
  }
  return false;
}

float fp8e4m3_to_float(uint8_t b) {
  const bool neg = b & 0x80;
  const int exp = (b >> 3) & 0xf;
  const int man = b & 0x7;
  float v;
  if (exp == 0xf && man == 0x7) {
    v = std::nanf("");
  } else if (exp == 0) {
    v = std::ldexp(float(man), -9);  // subnormal: man/8 * 2^-6
  } else {
    v = std::ldexp(1.0f + float(man) / 8.0f, exp - 7);
  }
  return neg ? -v : v;
}

uint8_t float_to_fp8e4m3(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  const uint8_t sign = uint8_t((u >> 24) & 0x80);
  if (std::isnan(f)) return uint8_t(sign | 0x7f);
  float a = std::fabs(f);
  if (a >= kFp8E4M3Max) return uint8_t(sign | 0x7e);  // satfinite
  // Quantize on the grid of the binade a falls in; the subnormal step (2^-9) covers a < 2^-6.
  int e;
  std::frexp(a, &e);     // a = m * 2^e, m in [0.5, 1)
  int unbiased = e - 1;  // a in [2^unbiased, 2^(unbiased+1))
  if (unbiased < -6) unbiased = -6;
  const float step = std::ldexp(1.0f, unbiased - 3);
  float q = std::nearbyint(a / step) * step;  // default rounding mode: nearest even
  if (q >= kFp8E4M3Max) return uint8_t(sign | 0x7e);
  if (q == 0.0f) return sign;
  int qe;
  std::frexp(q, &qe);
  int qunb = qe - 1;
  uint8_t bits;
  if (qunb < -6) {
    bits = uint8_t(std::lround(q / std::ldexp(1.0f, -9)));  // subnormal
  } else {
    const int man = int(std::lround((q / std::ldexp(1.0f, qunb) - 1.0f) * 8.0f));
    bits = uint8_t(((qunb + 7) << 3) | man);
  }
  return uint8_t(sign | bits);
}

uint8_t float_to_e2m1(float f) {
  // Candidates in magnitude order; ties go to the even code (codes 0,2,4,6 have mantissa bit 0).
  static constexpr float kMag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const uint8_t sign = std::signbit(f) ? 0x8 : 0x0;
  float a = std::fabs(f);
  if (std::isnan(a)) return uint8_t(sign | 0x7);
  if (a >= 6.0f) return uint8_t(sign | 0x7);
  int best = 0;
  for (int i = 1; i < 8; ++i) {
    const float d_best = std::fabs(a - kMag[best]);
    const float d = std::fabs(a - kMag[i]);
    if (d < d_best || (d == d_best && (i % 2 == 0))) best = i;
  }
  return uint8_t(sign | best);
}

}  // namespace orchid
