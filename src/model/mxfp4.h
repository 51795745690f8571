// MXFP4 as gpt-oss checkpoints store it: per output row, groups of 32 input elements share one E8M0 scale
// (bias 127); each group is 16 bytes, two E2M1 elements per byte, the low nibble holding the even element.
//   W[o][32g + 2j]     = e2m1(blocks[o][g][j] & 0xF) * 2^(scales[o][g] - 127)
//   W[o][32g + 2j + 1] = e2m1(blocks[o][g][j] >> 4)  * 2^(scales[o][g] - 127)
#pragma once

#include <cstdint>

namespace orchid::model {

inline constexpr int kMxfp4Group = 32;

// Dequantizes one output row of `in_dim` elements (in_dim % 32 == 0). Exact in fp32 for finite scales.
void dequantize_mxfp4_row(const uint8_t* blocks, const uint8_t* scales, int64_t in_dim, float* out);

// Dequantizes rows [row_begin, row_end) of a [rows, in_dim] matrix into out[(row - row_begin) * in_dim].
void dequantize_mxfp4_rows(const uint8_t* blocks, const uint8_t* scales, int64_t in_dim, int64_t row_begin,
                           int64_t row_end, float* out);

}  // namespace orchid::model
