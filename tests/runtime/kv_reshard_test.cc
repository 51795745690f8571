// K/V regrouped between tensor-parallel layouts (runtime/kv_reshard.h): every byte lands where the receiver's
// layout puts its (layer, K/V, page, row, head), for every pair of 1, 2, 4, 8 ranks, blocks of different
// sizes per layer (an fp32 layer next to narrower ones); bad shapes are refused.
#include "runtime/kv_reshard.h"

#include <gtest/gtest.h>

#include <cstring>
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
std::vector<uint8_t> layout(int ranks, int rows = kRows) {
  std::vector<uint8_t> out;
  const int per = kHeads / ranks;
  for (int r = 0; r < ranks; ++r)
    for (size_t l = 0; l < kHeadBytes.size(); ++l)
      for (int kv = 0; kv < 2; ++kv)
        for (int64_t p = 0; p < kPages; ++p)
          for (int row = 0; row < rows; ++row)
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

// In place (CUDA IPC, head-major pages): each receiver rank walks its pages in the handoff order, a cursor
// in every sender's part advancing by the sender's page, and copies the head runs; the result must be the
// receiver's part of the regrouped bytes.
TEST(KvReshard, HeadRunsOfInPlaceCopiesGiveTheRegroupedPages) {
  for (int from : {1, 2, 4, 8})
    for (int to : {1, 2, 4, 8}) {
      const std::vector<uint8_t> sent = layout(from, 1), want = layout(to, 1);
      const size_t part_from = sent.size() / size_t(from), part_to = want.size() / size_t(to);
      std::vector<uint8_t> got(want.size(), 0xEE);
      for (int t = 0; t < to; ++t) {
        std::vector<uint64_t> cursor(static_cast<size_t>(from), 0);
        for (int s = 0; s < from; ++s) cursor[size_t(s)] = part_from * size_t(s);
        uint64_t at = part_to * size_t(t);
        for (size_t l = 0; l < kHeadBytes.size(); ++l)
          for (int page = 0; page < 2 * kPages; ++page) {  // K then V, page by page
            const uint64_t page_bytes = kHeadBytes[l] * size_t(kHeads / to);
            for (const HeadRun& r : head_runs(from, to, kHeads, t, page_bytes))
              std::memcpy(got.data() + at + r.dst, sent.data() + cursor[size_t(r.sender)] + r.src, r.bytes);
            for (auto& c : cursor) c += sender_page_bytes(from, to, page_bytes);
            at += page_bytes;
          }
      }
      EXPECT_EQ(got, want) << from << " -> " << to;
    }
  EXPECT_THROW(head_runs(3, 1, kHeads, 0, 64), Error);
  EXPECT_THROW(head_runs(1, 2, kHeads, 0, 65), Error);  // not 4 heads' blocks
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
