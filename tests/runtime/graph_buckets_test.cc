// The decode graph buckets: every plain decode step a backend may run maps to one bucket of the list the
// warm-up captures, that bucket holds the step, and no bucket exceeds what a step may carry.
#include "runtime/graph_buckets.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

namespace orchid::runtime {
namespace {

TEST(DecodeGraphBuckets, TheListOfTheDefaultsAndOfUnevenLimits) {
  EXPECT_EQ(decode_graph_batches(256, 16384), (std::vector<int32_t>{1, 2, 4, 8, 16, 32, 64, 128, 256}));
  EXPECT_EQ(decode_graph_batches(32, 512), (std::vector<int32_t>{1, 2, 4, 8, 16, 32}));
  // --max-num-seqs between two buckets: the largest steps replay a graph of that size.
  EXPECT_EQ(decode_graph_batches(100, 8192), (std::vector<int32_t>{1, 2, 4, 8, 16, 32, 64, 100}));
  // Fewer tokens a step than sequences: the token budget caps the buckets.
  EXPECT_EQ(decode_graph_batches(256, 48), (std::vector<int32_t>{1, 2, 4, 8, 16, 32, 48}));
  // Beyond the largest bucket, steps run eagerly: the list stops there.
  EXPECT_EQ(decode_graph_batches(1024, 65536).back(), kMaxDecodeGraphBatch);
  EXPECT_EQ(decode_graph_batches(1, 1), (std::vector<int32_t>{1}));
}

TEST(DecodeGraphBuckets, EveryStepFindsItsBucketInTheList) {
  for (int32_t seqs : {1, 3, 7, 32, 100, 255, 256, 300}) {
    for (int32_t tokens : {1, 48, 100, 256, 512, 16384}) {
      const std::vector<int32_t> list = decode_graph_batches(seqs, tokens);
      ASSERT_TRUE(std::is_sorted(list.begin(), list.end()));
      const int32_t most = std::min({seqs, tokens, kMaxDecodeGraphBatch});
      for (int32_t B = 1; B <= most; ++B) {
        const int32_t bucket = decode_graph_bucket(B, 1, seqs, tokens);
        EXPECT_GE(bucket, B) << "seqs " << seqs << " tokens " << tokens;
        EXPECT_LE(bucket, std::min(seqs, tokens)) << "seqs " << seqs << " tokens " << tokens;
        EXPECT_NE(std::find(list.begin(), list.end(), bucket), list.end())
            << "B " << B << " seqs " << seqs << " tokens " << tokens;
      }
    }
  }
  // A verify step of 1 + k tokens a sequence: the token budget over q caps the bucket.
  EXPECT_EQ(decode_graph_bucket(5, 4, 256, 64), 8);
  EXPECT_EQ(decode_graph_bucket(20, 4, 256, 64), 16);
}

}  // namespace
}  // namespace orchid::runtime
