#include "model/mxfp4.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace orchid::model {
namespace {

// Independent decoding of an E2M1 nibble from its bit fields.
double e2m1_fields(int n) {
  const int s = (n >> 3) & 1, e = (n >> 1) & 3, m = n & 1;
  const double v = e == 0 ? 0.5 * m : std::ldexp(1.0 + 0.5 * m, e - 1);
  return s ? -v : v;
}

TEST(Mxfp4, DequantizeMatchesTheLayoutDefinition) {
  std::mt19937 rng(3);
  const int64_t in = 96, rows = 5, groups = in / 32;
  std::vector<uint8_t> blocks(size_t(rows * groups * 16)), scales(size_t(rows * groups));
  for (auto& b : blocks) b = uint8_t(rng());
  for (auto& s : scales) s = uint8_t(100 + rng() % 50);
  std::vector<float> out(size_t(rows * in));
  dequantize_mxfp4_rows(blocks.data(), scales.data(), in, 0, rows, out.data());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < in; ++k) {
      const int64_t g = k / 32, j = (k % 32) / 2;
      const uint8_t byte = blocks[size_t((r * groups + g) * 16 + j)];
      const int nib = (k % 2 == 0) ? (byte & 0xf) : (byte >> 4);  // low nibble = even element
      const double expect = e2m1_fields(nib) * std::ldexp(1.0, int(scales[size_t(r * groups + g)]) - 127);
      ASSERT_EQ(double(out[size_t(r * in + k)]), expect) << r << "," << k;
    }
}

TEST(Mxfp4, RowRangeOffsets) {
  const int64_t in = 64, rows = 4, groups = 2;
  std::vector<uint8_t> blocks(size_t(rows * groups * 16)), scales(size_t(rows * groups), 127);
  for (size_t i = 0; i < blocks.size(); ++i) blocks[i] = uint8_t(i * 37);
  std::vector<float> all(size_t(rows * in)), part(size_t(2 * in));
  dequantize_mxfp4_rows(blocks.data(), scales.data(), in, 0, rows, all.data());
  dequantize_mxfp4_rows(blocks.data(), scales.data(), in, 1, 3, part.data());
  for (int64_t i = 0; i < 2 * in; ++i) EXPECT_EQ(part[size_t(i)], all[size_t(in + i)]);
}

}  // namespace
}  // namespace orchid::model
