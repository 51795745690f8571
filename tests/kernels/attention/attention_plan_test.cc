// AttentionPlanBuilder: the blob read back through device_view (on the host copy) must describe the step:
// every token's sequence and position, prefill tiles covering each prefill token exactly once (heaviest
// first), decode slots, bucket padding, split choice bounds, and clear errors for inconsistent input.
#include "kernels/attention/attention_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <utility>
#include <vector>

#include "core/error.h"

namespace orchid::kernels::attention {
namespace {

std::vector<PlanSequence> random_step(std::mt19937_64& rng, int n, int* num_tokens) {
  std::vector<PlanSequence> seqs;
  std::uniform_int_distribution<int> kind(0, 4), len(2, 300), few(2, 9), pos(0, 5000);
  int cursor = 0;
  for (int i = 0; i < n; ++i) {
    PlanSequence s;
    const int k = kind(rng);
    s.num_q = k == 0 ? 0 : k == 1 ? 1 : k == 2 ? few(rng) : len(rng);
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
  for (int rows : {kPrefillBlockM, kPrefillBlockMHopper})  // the mma.sync and the Hopper kernels' tiles
    for (auto [group, max_queries] : {std::pair{1, 1},
                                      {5, 1},
                                      {8, 1},
                                      {64, 1},
                                      {96, 1},
                                      {8, 5},
                                      {8, 8},
                                      {8, 20},
                                      {1, 64},
                                      {16, 3},
                                      {96, 4}}) {
      int num_tokens = 0;
      const auto seqs = random_step(rng, 40, &num_tokens);
      PlanOptions o;
      o.num_kv_heads = 2;
      o.num_q_heads = 2 * group;
      o.token_bucket = num_tokens + 3;
      o.max_decode_queries = max_queries;
      o.prefill_rows = rows;
      // The rule the plan documents: a few queries whose rows fit one decode CTA go to the decode kernel.
      auto is_decode = [&](int num_q) {
        return num_q >= 1 && num_q <= max_queries && num_q * group <= kMaxDecodeRows;
      };
      AttentionPlanBuilder b;
      b.build(seqs, num_tokens, o);
      const AttentionPlan p = b.device_view(b.blob().data());  // host copy: readable here
      ASSERT_EQ(p.num_seqs, 40);
      ASSERT_EQ(p.num_tokens, num_tokens + 3);
      EXPECT_EQ(p.prefill_tokens_per_tile, rows / group);
      std::vector<int> covered(size_t(num_tokens), 0);
      int decodes = 0, most_queries = 1;
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
        decodes += is_decode(s.num_q);
        if (is_decode(s.num_q)) most_queries = std::max(most_queries, s.num_q);
      }
      for (int t = num_tokens; t < p.num_tokens; ++t) EXPECT_EQ(p.token_seq[t], -1);
      int last_prev = 1 << 30;
      for (int k = 0; k < p.num_prefill_tiles; ++k) {
        const PrefillTile tile = p.prefill_tiles[k];
        const AttnSeq& s = p.seqs[tile.seq];
        ASSERT_TRUE(s.num_q > 0 && !is_decode(s.num_q));
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
          EXPECT_EQ(covered[size_t(seqs[size_t(i)].q_start + t)], is_decode(seqs[size_t(i)].num_q) ? 0 : 1);
      ASSERT_EQ(p.decode_bucket, decodes);
      EXPECT_EQ(p.decode_q, most_queries);
      for (int k = 0; k < p.decode_bucket; ++k) EXPECT_TRUE(is_decode(p.seqs[p.decode_seqs[k]].num_q));
      EXPECT_GE(p.decode_splits, 1);
      EXPECT_LE(p.decode_splits, o.max_decode_splits);
      EXPECT_EQ(b.decode_workspace_bytes(), p.decode_splits > 1 ? size_t(decodes) * size_t(most_queries) *
                                                                      o.num_q_heads * p.decode_splits * 65 * 4
                                                                : 0u);
      EXPECT_LE(b.decode_workspace_bytes(), decode_workspace_bound(std::max(1, decodes), o));
    }
}

// A speculative verify step (1 + k tokens a sequence) goes to the decode kernel when the option allows it
// and its rows fit, and the workspace bound covers every bucket the graphs use.
TEST(AttentionPlan, VerifyStepsGoToTheDecodeKernel) {
  PlanOptions o;  // 64/8 heads: a decode CTA holds up to 8 tokens
  o.max_decode_queries = 5;
  AttentionPlanBuilder b;
  b.build({{0, 5, 8000, 0, 0}, {5, 3, 100, 0, 0}, {8, 1, 7, 0, 0}}, 9, o);
  EXPECT_EQ(b.sizes().decode_bucket, 3);
  EXPECT_EQ(b.sizes().decode_q, 5);
  EXPECT_EQ(b.sizes().num_prefill_tiles, 0);
  EXPECT_EQ(b.sizes().decode_splits, decode_splits_for(3, o));  // 8k keys: the GPU-filling split count
  b.build({{0, 6, 8000, 0, 0}}, 6, o);                          // more than the option allows
  EXPECT_EQ(b.sizes().decode_bucket, 0);
  EXPECT_EQ(b.sizes().num_prefill_tiles, 1);
  o.max_decode_queries = 64;  // the rows limit: 8 tokens x 8 heads
  b.build({{0, 8, 100, 0, 0}, {8, 9, 100, 0, 0}}, 17, o);
  EXPECT_EQ(b.sizes().decode_bucket, 1);
  EXPECT_EQ(b.sizes().decode_q, 8);
  EXPECT_EQ(b.sizes().num_prefill_tiles, 1);
  // A graph's plan: fixed buckets and decode_splits_for's splits, within the bound.
  o.max_decode_queries = 4;
  for (int bucket : {1, 2, 4, 8, 16, 32, 64, 128, 256}) {
    PlanOptions g = o;
    g.decode_bucket = g.seq_bucket = bucket;
    g.token_bucket = 4 * bucket;
    g.decode_splits = decode_splits_for(bucket, o);
    b.build({{0, 4, 3000, 0, 0}}, 4, g);
    EXPECT_EQ(b.sizes().decode_q, 4);
    EXPECT_LE(b.decode_workspace_bytes(), decode_workspace_bound(256, o)) << bucket;
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

// Sliding-window launches get their own split count: a 128-key window spans at most 3 key tiles, so one
// split (no merge) where the full layers split a long context over the GPU; explicit counts are kept.
TEST(AttentionPlan, WindowLaunchesTakeFewerSplits) {
  PlanOptions o;  // 64/8 heads, 132 SMs
  o.window = 128;
  AttentionPlanBuilder b;
  b.build({{0, 1, 32767, 0, 0}}, 1, o);
  EXPECT_EQ(b.sizes().decode_splits, 33);
  EXPECT_EQ(b.sizes().decode_splits_window, 1);
  o.window = 1024;  // 17 tiles: 8 splits of two or three
  b.build({{0, 1, 32767, 0, 0}}, 1, o);
  EXPECT_EQ(b.sizes().decode_splits_window, 8);
  o.window = 0;  // no sliding layers: the full layers' count
  b.build({{0, 1, 32767, 0, 0}}, 1, o);
  EXPECT_EQ(b.sizes().decode_splits_window, 33);
  o.window = 128;
  o.decode_splits = 8;  // explicit: both kinds (the kernel tests rely on it)
  b.build({{0, 1, 32767, 0, 0}}, 1, o);
  EXPECT_EQ(b.sizes().decode_splits_window, 8);
  o.decode_splits_window = 3;
  b.build({{0, 1, 32767, 0, 0}}, 1, o);
  EXPECT_EQ(b.sizes().decode_splits_window, 3);
  EXPECT_EQ(window_splits_for(33, 5, o), 2);  // a verify step of 1 + 4 queries: 132 keys, up to 4 tiles
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
  bad = o;
  bad.prefill_rows = 160;  // neither kernel's tile
  EXPECT_THROW(b.build({{0, 200, 0, 0, 0}}, 200, bad), orchid::Error);
  bad = o;
  bad.decode_splits = kMaxDecodeSplits + 1;  // more than the merge kernel reads
  EXPECT_THROW(b.build({{0, 1, 4000, 0, 0}}, 1, bad), orchid::Error);
  bad.decode_splits = kMaxDecodeSplits;
  EXPECT_NO_THROW(b.build({{0, 1, 4000, 0, 0}}, 1, bad));
  bad = o;
  bad.max_decode_splits = kMaxDecodeSplits + 1;
  EXPECT_THROW(b.build({{0, 1, 4000, 0, 0}}, 1, bad), orchid::Error);
  EXPECT_NO_THROW(b.build({}, 0, o));
  EXPECT_EQ(b.sizes().num_prefill_tiles, 0);
  EXPECT_EQ(b.sizes().decode_bucket, 0);
}

// The decode slot list (padded to the bucket with -1) ends the blob, with or without split decodes.
TEST(AttentionPlan, TheDecodeSlotListEndsTheBlob) {
  std::vector<PlanSequence> seqs(3);
  for (int i = 0; i < 3; ++i) {
    seqs[size_t(i)].q_start = i;
    seqs[size_t(i)].num_q = 1;
    seqs[size_t(i)].start_pos = 1000 * (i + 1);
  }
  for (int splits : {1, 4}) {
    PlanOptions o;
    o.num_kv_heads = 8;
    o.num_q_heads = 64;
    o.decode_bucket = 5;
    o.decode_splits = splits;
    AttentionPlanBuilder b;
    b.build(seqs, 3, o);
    const std::vector<int32_t>& blob = b.blob();
    const AttentionPlan v = b.device_view(blob.data());
    EXPECT_EQ(v.decode_seqs + 5, blob.data() + blob.size());  // the slot list ends the blob
  }
}

// The split records of a plan (PlanOptions::balance_prefill / prefill_pieces) describe its tiles in order:
// each tile's pieces 0 .. pieces - 1 (at most its 128-key tiles), the split ones listed in split_tiles with
// consecutive partial slots. Returns the pieces' work items (split records x KV heads).
int64_t check_pieces(const AttentionPlan& p) {
  if (p.num_split_tiles == 0) {
    EXPECT_EQ(p.num_prefill_pieces, 0);
    EXPECT_EQ(p.num_partials, 0);
    return 0;
  }
  int rec = 0, slot = 0, split = 0;
  for (int k = 0; k < p.num_prefill_tiles; ++k) {
    const PrefillTile t = p.prefill_tiles[k];
    const AttnSeq& s = p.seqs[t.seq];
    const int last = s.start_pos + std::min(s.num_q, t.q0 + p.prefill_tokens_per_tile) - 1;
    const int pieces = p.prefill_pieces[rec].pieces;
    EXPECT_GE(pieces, 1);
    EXPECT_LE(pieces, last / 128 + 1) << "more pieces than key tiles";
    if (pieces > 1) {
      EXPECT_LT(split, p.num_split_tiles);
      if (split < p.num_split_tiles) {
        EXPECT_EQ(p.split_tiles[split], rec);
      }
      ++split;
    }
    for (int q = 0; q < pieces; ++q, ++rec) {
      const PrefillPiece& r = p.prefill_pieces[rec];
      EXPECT_EQ(r.seq, t.seq);
      EXPECT_EQ(r.q0, t.q0);
      EXPECT_EQ(r.piece, q);
      EXPECT_EQ(r.pieces, pieces);
      EXPECT_EQ(r.slot, pieces > 1 ? slot++ : -1);
    }
  }
  EXPECT_EQ(rec, p.num_prefill_pieces);
  EXPECT_EQ(split, p.num_split_tiles);
  EXPECT_EQ(slot, p.num_partials);
  return int64_t(slot) * p.num_kv_heads;
}

// Balance: a chunk of 2048 tokens at 30720 (86 tiles of 24 tokens x 8 KV heads = 688 equal items on 132
// SMs, 5.2 rounds) splits its last round's tiles; a chunk of 1584 (exactly 4 rounds) and a plan without the
// option do not; random steps keep the records, the workspace and the blob within their bounds.
TEST(AttentionPlan, BalancedPrefillSplitsAShortLastRound) {
  PlanOptions o;  // 64/8 heads, 132 SMs
  o.prefill_rows = kPrefillBlockMHopper;
  o.balance_prefill = true;
  AttentionPlanBuilder b;
  b.build({{0, 2048, 30720, 0, 0}}, 2048, o);
  AttentionPlan p = b.device_view(b.blob().data());
  EXPECT_GT(p.num_split_tiles, 0);
  EXPECT_LT(p.num_split_tiles, p.num_prefill_tiles);  // only the tail
  EXPECT_EQ(p.prefill_pieces[0].pieces, 1);
  const int64_t split_items = check_pieces(p);
  EXPECT_LE(split_items, 2 * o.sm_count);
  EXPECT_GT(b.prefill_workspace_bytes(), 0u);
  EXPECT_LE(b.workspace_bytes(), std::max(prefill_workspace_bound(o), decode_workspace_bound(1, o)));
  EXPECT_LE(b.blob_bytes(), plan_blob_bound(2048, 1, o));
  std::printf("chunk 2048 at 30720: %d of %d tiles split into %d pieces\n", p.num_split_tiles,
              p.num_prefill_tiles, p.prefill_pieces[p.split_tiles[0]].pieces);

  b.build({{0, 1584, 30720, 0, 0}}, 1584, o);  // 66 tiles x 8 = 4 x 132 items
  EXPECT_EQ(b.sizes().num_split_tiles, 0);
  EXPECT_EQ(b.prefill_workspace_bytes(), 0u);
  PlanOptions off = o;
  off.balance_prefill = false;
  b.build({{0, 2048, 30720, 0, 0}}, 2048, off);
  EXPECT_EQ(b.sizes().num_split_tiles, 0);
  EXPECT_EQ(prefill_workspace_bound(off), 0u);

  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 200; ++trial) {
    PlanOptions r = o;
    r.sm_count = std::uniform_int_distribution<int>(1, 140)(rng);
    r.prefill_rows = trial % 2 ? kPrefillBlockM : kPrefillBlockMHopper;
    int num_tokens = 0;
    auto seqs = random_step(rng, std::uniform_int_distribution<int>(1, 12)(rng), &num_tokens);
    for (auto& s : seqs) s.start_pos *= 4;  // deep chunks too (to 20000)
    b.build(seqs, num_tokens, r);
    p = b.device_view(b.blob().data());
    const int64_t items = check_pieces(p);
    EXPECT_LE(items, 2 * r.sm_count);
    EXPECT_LE(b.workspace_bytes(),
              std::max(prefill_workspace_bound(r), decode_workspace_bound(int(seqs.size()), r)));
    EXPECT_LE(b.blob_bytes(), plan_blob_bound(num_tokens, int(seqs.size()), r));
  }
}

// PlanOptions::prefill_pieces (tests): every tile of two or more key tiles in min(pieces, its key tiles).
TEST(AttentionPlan, ForcedPiecesSplitEveryLongTile) {
  PlanOptions o;
  o.prefill_rows = kPrefillBlockMHopper;
  o.prefill_pieces = 3;
  AttentionPlanBuilder b;
  b.build({{0, 100, 0, 0, 0}, {100, 30, 200, 0, 0}, {130, 50, 1000, 0, 0}}, 180, o);
  const AttentionPlan p = b.device_view(b.blob().data());
  check_pieces(p);
  int rec = 0;
  for (int k = 0; k < p.num_prefill_tiles; ++k) {
    const PrefillTile t = p.prefill_tiles[k];
    const AttnSeq& s = p.seqs[t.seq];
    const int last = s.start_pos + std::min(s.num_q, t.q0 + p.prefill_tokens_per_tile) - 1;
    EXPECT_EQ(p.prefill_pieces[rec].pieces, std::min(3, last / 128 + 1));
    rec += p.prefill_pieces[rec].pieces;
  }
  EXPECT_THROW(prefill_workspace_bound(o), orchid::Error);  // no runtime bound for the test option
}

}  // namespace
}  // namespace orchid::kernels::attention
