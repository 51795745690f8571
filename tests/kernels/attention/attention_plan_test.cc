// AttentionPlanBuilder: the blob read back through device_view (on the host copy) must describe the step:
// every token's sequence and position, prefill tiles covering each prefill token exactly once (heaviest
// first), decode slots, bucket padding, split choice bounds, and clear errors for inconsistent input.
#include "kernels/attention/attention_plan.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "core/error.h"

namespace orchid::kernels::attention {
namespace {

std::vector<PlanSequence> random_step(std::mt19937_64& rng, int n, int* num_tokens) {
  std::vector<PlanSequence> seqs;
  std::uniform_int_distribution<int> kind(0, 3), len(2, 300), pos(0, 5000);
  int cursor = 0;
  for (int i = 0; i < n; ++i) {
    PlanSequence s;
    const int k = kind(rng);
    s.num_q = k == 0 ? 0 : k == 1 ? 1 : len(rng);
    s.start_pos = pos(rng);
    s.q_start = cursor;
    s.full_table_begin = 100 * i;
    s.sliding_table_begin = 100 * i + 50;
    cursor += s.num_q;
    seqs.push_back(s);
  }
  *num_tokens = cursor;
  return seqs;
}

TEST(AttentionPlan, BlobDescribesTheStep) {
  std::mt19937_64 rng(7);
  for (int group : {1, 5, 8, 64, 96}) {
    int num_tokens = 0;
    const auto seqs = random_step(rng, 40, &num_tokens);
    PlanOptions o;
    o.num_kv_heads = 2;
    o.num_q_heads = 2 * group;
    o.token_bucket = num_tokens + 3;
    AttentionPlanBuilder b;
    b.build(seqs, num_tokens, o);
    const AttentionPlan p = b.device_view(b.blob().data());  // host copy: readable here
    ASSERT_EQ(p.num_seqs, 40);
    ASSERT_EQ(p.num_tokens, num_tokens + 3);
    EXPECT_EQ(p.prefill_tokens_per_tile, kPrefillBlockM / group);
    std::vector<int> covered(size_t(num_tokens), 0);
    int decodes = 0;
    for (int i = 0; i < 40; ++i) {
      const AttnSeq& s = p.seqs[i];
      EXPECT_EQ(s.q_start, seqs[size_t(i)].q_start);
      EXPECT_EQ(s.num_q, seqs[size_t(i)].num_q);
      EXPECT_EQ(s.start_pos, seqs[size_t(i)].start_pos);
      EXPECT_EQ(s.table_begin[kFullTable], seqs[size_t(i)].full_table_begin);
      EXPECT_EQ(s.table_begin[kSlidingTable], seqs[size_t(i)].sliding_table_begin);
      for (int t = 0; t < s.num_q; ++t) {
        EXPECT_EQ(p.token_seq[s.q_start + t], i);
        EXPECT_EQ(p.token_pos[s.q_start + t], s.start_pos + t);
      }
      decodes += s.num_q == 1 && group <= kMaxDecodeGroup;
    }
    for (int t = num_tokens; t < p.num_tokens; ++t) EXPECT_EQ(p.token_seq[t], -1);
    int last_prev = 1 << 30;
    for (int k = 0; k < p.num_prefill_tiles; ++k) {
      const PrefillTile tile = p.prefill_tiles[k];
      const AttnSeq& s = p.seqs[tile.seq];
      ASSERT_TRUE(s.num_q > 1 || group > kMaxDecodeGroup);
      ASSERT_EQ(tile.q0 % p.prefill_tokens_per_tile, 0);
      const int n = std::min(p.prefill_tokens_per_tile, s.num_q - tile.q0);
      ASSERT_GT(n, 0);
      for (int t = 0; t < n; ++t) covered[size_t(s.q_start + tile.q0 + t)]++;
      const int last = s.start_pos + tile.q0 + n - 1;
      EXPECT_LE(last, last_prev) << "tiles not ordered heaviest first";
      last_prev = last;
    }
    for (int i = 0; i < 40; ++i)
      for (int t = 0; t < seqs[size_t(i)].num_q; ++t)
        EXPECT_EQ(covered[size_t(seqs[size_t(i)].q_start + t)],
                  seqs[size_t(i)].num_q > 1 || group > kMaxDecodeGroup ? 1 : 0);
    ASSERT_EQ(p.decode_bucket, decodes);
    for (int k = 0; k < p.decode_bucket; ++k) EXPECT_EQ(p.seqs[p.decode_seqs[k]].num_q, 1);
    EXPECT_GE(p.decode_splits, 1);
    EXPECT_LE(p.decode_splits, o.max_decode_splits);
    EXPECT_EQ(b.decode_workspace_bytes(),
              p.decode_splits > 1 ? size_t(decodes) * o.num_q_heads * p.decode_splits * 65 * 4 : 0u);
  }
}

TEST(AttentionPlan, BucketsPadWithMinusOneAndKeepTheLayout) {
  PlanOptions o;
  o.token_bucket = 8;
  o.seq_bucket = 6;
  o.decode_bucket = 5;
  o.decode_splits = 4;
  AttentionPlanBuilder a, b;
  a.build({{0, 1, 10, 0, 0}, {1, 1, 300, 4, 4}}, 2, o);
  b.build({{0, 1, 5000, 0, 0}, {1, 1, 0, 9, 9}, {2, 1, 7, 1, 2}}, 3, o);
  EXPECT_EQ(a.blob_bytes(), b.blob_bytes());
  const AttentionPlan pa = a.device_view(a.blob().data()), pb = b.device_view(b.blob().data());
  EXPECT_EQ(pa.decode_splits, 4);
  EXPECT_EQ(pa.decode_bucket, 5);
  EXPECT_EQ(pa.num_seqs, 6);
  EXPECT_EQ(pa.decode_seqs[2], -1);
  EXPECT_EQ(pb.decode_seqs[2], 2);
  EXPECT_EQ(pb.decode_seqs[3], -1);
  EXPECT_EQ(pa.token_seq[2], -1);
  EXPECT_EQ(pa.seqs[4].num_q, 0);
  EXPECT_EQ(static_cast<const void*>(pa.decode_seqs) == static_cast<const void*>(a.blob().data()), false);
  EXPECT_EQ(reinterpret_cast<const char*>(pa.decode_seqs) - reinterpret_cast<const char*>(a.blob().data()),
            reinterpret_cast<const char*>(pb.decode_seqs) - reinterpret_cast<const char*>(b.blob().data()));
}

TEST(AttentionPlan, AutomaticSplitsFillTheGpuButStayLong) {
  PlanOptions o;  // 64/8 heads, 132 SMs
  AttentionPlanBuilder b;
  b.build({{0, 1, 32767, 0, 0}}, 1, o);
  const int long_splits = b.sizes().decode_splits;
  EXPECT_GE(long_splits * 8, 132);  // batch 1: at least one CTA per SM
  b.build({{0, 1, 100, 0, 0}}, 1, o);
  EXPECT_EQ(b.sizes().decode_splits, 1);  // two tiles: not worth a merge
  std::vector<PlanSequence> many;
  for (int i = 0; i < 64; ++i) many.push_back({i, 1, 5000, 0, 0});
  b.build(many, 64, o);
  EXPECT_EQ(b.sizes().decode_splits, 1);  // 512 CTAs already
}

TEST(AttentionPlan, RejectsInconsistentSteps) {
  AttentionPlanBuilder b;
  PlanOptions o;
  EXPECT_THROW(b.build({{0, 5, 0, 0, 0}}, 4, o), orchid::Error);                   // past the step's tokens
  EXPECT_THROW(b.build({{0, 3, 0, 0, 0}, {2, 2, 0, 0, 0}}, 4, o), orchid::Error);  // overlap
  EXPECT_THROW(b.build({{0, 1, -1, 0, 0}}, 1, o), orchid::Error);                  // negative position
  PlanOptions bad = o;
  bad.num_q_heads = 60;  // not a multiple of 8
  EXPECT_THROW(b.build({}, 0, bad), orchid::Error);
  bad = o;
  bad.decode_bucket = 1;
  EXPECT_THROW(b.build({{0, 1, 0, 0, 0}, {1, 1, 0, 0, 0}}, 2, bad), orchid::Error);
  bad = o;
  bad.token_bucket = 1;
  EXPECT_THROW(b.build({{0, 2, 0, 0, 0}}, 2, bad), orchid::Error);
  EXPECT_NO_THROW(b.build({}, 0, o));
  EXPECT_EQ(b.sizes().num_prefill_tiles, 0);
  EXPECT_EQ(b.sizes().decode_bucket, 0);
}

}  // namespace
}  // namespace orchid::kernels::attention
