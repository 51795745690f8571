// The GPU memory plan as a pure function: a rank's share of the device, the pools that fit after weights
// and workspace, --kv-pages, and the errors.
#include "runtime/kv_memory_plan.h"

#include <gtest/gtest.h>

#include <cstdio>

#include "core/error.h"

namespace orchid::runtime {
namespace {

constexpr size_t kGiB = size_t(1) << 30;

TEST(RankMemoryBudget, SplitsTheInstancesShareEvenly) {
  // 140 GiB device, 0.9 utilization: 126 GiB for this instance's ranks, whatever else is in use (2 GiB).
  const size_t total = 140 * kGiB, free = 138 * kGiB;
  EXPECT_EQ(rank_memory_budget(total, free, 0.9, 1), size_t(double(total) * 0.9));
  EXPECT_EQ(rank_memory_budget(total, free, 0.9, 4), size_t(double(total) * 0.9 / 4));
  // A second instance on the device: 0.3 of it while the first holds 0.3 and more is free.
  EXPECT_EQ(rank_memory_budget(total, total - size_t(0.3 * double(total)) - kGiB, 0.3, 1),
            size_t(double(total) * 0.3));
  EXPECT_EQ(rank_memory_budget(total, total + 1, 0.5, 2), size_t(double(total) * 0.5 / 2));
}

TEST(RankMemoryBudget, ClearErrors) {
  EXPECT_THROW(rank_memory_budget(100 * kGiB, 10 * kGiB, 0.5, 1), Error);  // 50 GiB asked, 10 free
  EXPECT_THROW(rank_memory_budget(100 * kGiB, 100 * kGiB, 0.0, 1), Error);
  EXPECT_THROW(rank_memory_budget(100 * kGiB, 100 * kGiB, 1.5, 1), Error);
  EXPECT_THROW(rank_memory_budget(100 * kGiB, 100 * kGiB, 0.9, 0), Error);
  try {
    rank_memory_budget(100 * kGiB, 10 * kGiB, 0.5, 1);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--gpu-memory-utilization"), std::string::npos) << e.what();
  }
}

// gpt-oss-20b on one rank: 12 full and 12 sliding layers (one of them fp32: 13 units), 8 KV heads.
KvPoolInput gpt_oss_20b(int tp) {
  KvPoolInput in;
  in.budget = 120 * kGiB;
  in.allocated = 13 * kGiB + 3 * kGiB;
  in.full_layers = 12;
  in.sliding_units = 13;
  in.page_layer_bytes = size_t(2) * size_t(8 / tp) * 16 * 64 * 2;
  in.page_size = 16;
  in.sliding_window = 128;
  in.max_step_tokens = 16384;
  in.max_step_seqs = 256;
  in.max_model_len = 131072;
  return in;
}

TEST(PlanKvPools, SlidingForTheWindowsFullForTheRest) {
  const KvPoolInput in = gpt_oss_20b(1);
  const KvPoolPlan p = plan_kv_pools(in);
  // Sliding: every sequence's window (8 pages + 2) plus one step's chunk (1024 pages).
  EXPECT_EQ(p.sliding_pages, 256 * (8 + 2) + 1024);
  const double left = double(in.budget - in.allocated - in.reserve) -
                      double(p.sliding_pages) * 13.0 * double(in.page_layer_bytes);
  EXPECT_EQ(p.full_pages, int32_t(left / (12.0 * double(in.page_layer_bytes))));
  EXPECT_EQ(p.bytes, size_t(p.full_pages) * 12 * in.page_layer_bytes +
                         size_t(p.sliding_pages) * 13 * in.page_layer_bytes);
  EXPECT_LE(double(p.bytes), double(in.budget - in.allocated - in.reserve));
  // A TP rank holds fewer heads per page: at least twice the pages in the same bytes (its sliding pool
  // shrinks too).
  EXPECT_GE(plan_kv_pools(gpt_oss_20b(2)).full_pages, 2 * p.full_pages);
}

TEST(PlanKvPools, KvPagesOverridesAndModelsWithoutSlidingLayers) {
  KvPoolInput in = gpt_oss_20b(1);
  in.kv_pages = 4096;
  EXPECT_EQ(plan_kv_pools(in).full_pages, 4096);
  in.sliding_units = 0;
  const KvPoolPlan p = plan_kv_pools(in);
  EXPECT_EQ(p.sliding_pages, 0);
  EXPECT_EQ(p.bytes, size_t(4096) * 12 * in.page_layer_bytes);
}

// An FP8 (e4m3) cache: half the bytes a page, the precise fp32 layer now 4 sliding layers' worth
// (12 + 3 units): at least twice the full pages, so at least twice the 128k-token sequences.
TEST(PlanKvPools, Fp8PagesHoldTwiceTheSequences) {
  const KvPoolInput bf16 = gpt_oss_20b(1);
  KvPoolInput fp8 = bf16;
  fp8.page_layer_bytes = bf16.page_layer_bytes / 2;
  fp8.sliding_units = 12 + 3;
  const KvPoolPlan a = plan_kv_pools(bf16), b = plan_kv_pools(fp8);
  EXPECT_GE(b.full_pages, 2 * a.full_pages);
  EXPECT_LE(double(b.bytes), double(fp8.budget - fp8.allocated - fp8.reserve));
  const int64_t seqs_bf16 = sequences_that_fit(a, 16, 131072), seqs_fp8 = sequences_that_fit(b, 16, 131072);
  EXPECT_EQ(seqs_bf16, int64_t(a.full_pages) / 8192);
  EXPECT_GE(seqs_fp8, 2 * seqs_bf16);
  std::printf("  20b, 104 GiB for the cache: %d bf16 pages (%lld sequences of 131072), %d fp8 pages (%lld)\n",
              a.full_pages, (long long)seqs_bf16, b.full_pages, (long long)seqs_fp8);
}

TEST(PlanKvPools, SequencesThatFitRoundsPagesUp) {
  KvPoolPlan p;
  p.full_pages = 100;
  EXPECT_EQ(sequences_that_fit(p, 16, 160), 10);  // 10 pages each
  EXPECT_EQ(sequences_that_fit(p, 16, 161), 9);   // 11 pages each
  EXPECT_EQ(sequences_that_fit(p, 16, 1601), 0);
  EXPECT_EQ(sequences_that_fit(p, 0, 16), 0);
  EXPECT_EQ(sequences_that_fit(p, 16, 0), 0);
}

TEST(PlanKvPools, TooLittleMemoryNamesTheFlags) {
  KvPoolInput in = gpt_oss_20b(1);
  in.allocated = in.budget - in.reserve;  // nothing left
  try {
    plan_kv_pools(in);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("--gpu-memory-utilization"), std::string::npos) << m;
    EXPECT_NE(m.find("--max-num-batched-tokens"), std::string::npos) << m;
  }
  in.kv_pages = 100;  // asked for fewer pages than one 8192-token sequence needs
  in.allocated = 0;
  EXPECT_THROW(plan_kv_pools(in), Error);
}

}  // namespace
}  // namespace orchid::runtime
