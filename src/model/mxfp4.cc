#include "model/mxfp4.h"

#include <cmath>

#include "core/dtypes.h"

namespace orchid::model {

void dequantize_mxfp4_row(const uint8_t* blocks, const uint8_t* scales, int64_t in_dim, float* out) {
  const int64_t groups = in_dim / kMxfp4Group;
  for (int64_t g = 0; g < groups; ++g) {
    const float scale = e8m0_to_float(scales[g]);
    const uint8_t* b = blocks + g * 16;
    float* o = out + g * kMxfp4Group;
    for (int j = 0; j < 16; ++j) {
      o[2 * j] = e2m1_to_float(b[j] & 0xf) * scale;
      o[2 * j + 1] = e2m1_to_float(b[j] >> 4) * scale;
    }
  }
}

void dequantize_mxfp4_rows(const uint8_t* blocks, const uint8_t* scales, int64_t in_dim, int64_t row_begin,
                           int64_t row_end, float* out) {
  const int64_t groups = in_dim / kMxfp4Group;
  for (int64_t r = row_begin; r < row_end; ++r)
    dequantize_mxfp4_row(blocks + r * groups * 16, scales + r * groups, in_dim,
                         out + (r - row_begin) * in_dim);
}

}  // namespace orchid::model
