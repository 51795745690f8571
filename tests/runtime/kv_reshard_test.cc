// K/V regrouped between tensor-parallel layouts (runtime/kv_reshard.h): every byte lands where the receiver's
// layout puts its (layer, K/V, page, row, head), for every pair of 1, 2, 4, 8 ranks, blocks of different
// sizes per layer (an fp32 layer next to narrower ones); bad shapes are refused.
#include "runtime/kv_reshard.h"

#include <gtest/gtest.h>

#include <vector>

#include "core/error.h"

namespace orchid::runtime {
namespace {

constexpr int kHeads = 8, kRows = 3;
constexpr int64_t kPages = 2;
const std::vector<size_t> kHeadBytes = {8, 16, 4};

// The byte a (layer, kv, page, row, head, byte) holds: distinct enough to catch any misplaced block.
uint8_t value(size_t l, int kv, int64_t p, int row, int h, size_t b) {
  return uint8_t(l * 97 + size_t(kv) * 53 + size_t(p) * 29 + size_t(row) * 13 + size_t(h) * 7 + b * 3 + 1);
}

// The bytes `ranks` ranks hold, in their rank order.
std::vector<uint8_t> layout(int ranks) {
  std::vector<uint8_t> out;
  const int per = kHeads / ranks;
  for (int r = 0; r < ranks; ++r)
    for (size_t l = 0; l < kHeadBytes.size(); ++l)
      for (int kv = 0; kv < 2; ++kv)
        for (int64_t p = 0; p < kPages; ++p)
          for (int row = 0; row < kRows; ++row)
            for (int h = r * per; h < (r + 1) * per; ++h)
              for (size_t b = 0; b < kHeadBytes[l]; ++b) out.push_back(value(l, kv, p, row, h, b));
  return out;
}

TEST(KvReshard, EveryPairOfRankCounts) {
  for (int from : {1, 2, 4, 8})
    for (int to : {1, 2, 4, 8}) {
      const std::vector<uint8_t> got = reshard_kv(layout(from), from, to, kHeads, kPages, kRows, kHeadBytes);
      EXPECT_EQ(got, layout(to)) << from << " -> " << to;
    }
}

TEST(KvReshard, BadShapesAreRefused) {
  const std::vector<uint8_t> bytes = layout(2);
  EXPECT_THROW(reshard_kv(bytes, 3, 1, kHeads, kPages, kRows, kHeadBytes), Error);
  EXPECT_THROW(reshard_kv(bytes, 2, 16, kHeads, kPages, kRows, kHeadBytes), Error);
  EXPECT_THROW(reshard_kv(std::span(bytes).first(bytes.size() - 1), 2, 1, kHeads, kPages, kRows, kHeadBytes),
               Error);
}

}  // namespace
}  // namespace orchid::runtime
