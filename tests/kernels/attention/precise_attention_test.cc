// The precise layers' fp32 sink attention against the double-precision reference on random fp32 inputs:
// GQA ratios, page sizes, full and sliding windows (kNoPage for pages that left the window), odd lengths,
// prefill and decode tokens in one plan, decode-only steps, padding tokens, queries read through a row stride
// (the fp32 QKV rows). Cache entries a query may not read are NaN; padding rows of the output must stay
// untouched. hi + lo must match the reference to its 16 significant bits (2^-17, far below BF16's 2^-9), hi
// alone to a BF16 rounding.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/attention/attention_plan.h"
#include "kernels/attention/kv_layout.h"
#include "kernels/attention/precise_attention.h"
#include "tests/kernels/attention/attention_reference.h"
#include "tests/kernels/gpu_test_util.h"

namespace orchid::kernels::attention {
namespace {

using orchid::testing::DeviceBuffer;
using orchid::testing::kPoisonBf16;

struct Case {
  int hq = 64, hkv = 8, page_size = 16, window = 128;
  bool sinks = true;
  std::vector<std::pair<int, int>> seqs;  // (num_q, start_pos)
  int extra_tokens = 0;
  int q_stride_pad = 0;  // extra elements after each token's q heads (the k/v columns of a QKV row)
};

void run_case(const Case& c, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const int hq = c.hq, hkv = c.hkv, ps = c.page_size, n = int(c.seqs.size());
  const int q_stride = hq * 64 + c.q_stride_pad;
  const TableKind kind = c.window > 0 ? kSlidingTable : kFullTable;
  std::vector<PlanSequence> seqs(static_cast<size_t>(n));
  std::vector<int32_t> table;
  std::vector<std::vector<int32_t>> rows(static_cast<size_t>(n));
  int cursor = 0, num_pages = 0;
  for (int i = 0; i < n; ++i) {
    auto [num_q, start] = c.seqs[size_t(i)];
    seqs[size_t(i)].q_start = cursor;
    seqs[size_t(i)].num_q = num_q;
    seqs[size_t(i)].start_pos = start;
    cursor += num_q;
    const int lowest = c.window > 0 ? std::max(0, start - c.window + 1) : 0;
    for (int pg = 0; pg * ps < start + num_q; ++pg)
      rows[size_t(i)].push_back((pg + 1) * ps <= lowest ? kNoPage : num_pages++);
  }
  // Page ids shuffled; each sequence's row at a gap in the flat table.
  std::vector<int32_t> perm(static_cast<size_t>(num_pages + 2));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  for (int i = 0; i < n; ++i) {
    table.push_back(-7);
    seqs[size_t(i)].full_table_begin = seqs[size_t(i)].sliding_table_begin = int32_t(table.size());
    for (int32_t id : rows[size_t(i)]) table.push_back(id < 0 ? kNoPage : perm[size_t(id)]);
  }
  const int token_rows = cursor + c.extra_tokens;
  const size_t pool = kv_pool_elements(num_pages + 2, hkv, ps);
  std::vector<float> k_pool(pool, NAN), v_pool(pool, NAN);
  std::vector<std::vector<float>> k_log(static_cast<size_t>(n)), v_log(static_cast<size_t>(n));
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int i = 0; i < n; ++i) {
    const int ctx = c.seqs[size_t(i)].first + c.seqs[size_t(i)].second;
    const int lowest = c.window > 0 ? std::max(0, c.seqs[size_t(i)].second - c.window + 1) : 0;
    k_log[size_t(i)].assign(size_t(ctx) * hkv * 64, 0.0f);
    v_log[size_t(i)].assign(size_t(ctx) * hkv * 64, 0.0f);
    for (int t = lowest; t < ctx; ++t) {
      const int32_t page = table[size_t(seqs[size_t(i)].full_table_begin + t / ps)];
      for (int h = 0; h < hkv; ++h)
        for (int d = 0; d < 64; ++d) {
          const float kv = 1.5f * nd(rng), vv = nd(rng);
          k_log[size_t(i)][(size_t(t) * hkv + h) * 64 + d] = kv;
          v_log[size_t(i)][(size_t(t) * hkv + h) * 64 + d] = vv;
          const size_t at = kv_offset(page, h, t % ps, hkv, log2_exact(ps)) + size_t(d);
          k_pool[at] = kv;
          v_pool[at] = vv;
        }
    }
  }
  std::vector<float> q(size_t(token_rows) * q_stride, NAN), sinks(static_cast<size_t>(hq));
  for (int t = 0; t < cursor; ++t)
    for (int i = 0; i < hq * 64; ++i) q[size_t(t) * q_stride + i] = 1.5f * nd(rng);
  for (float& s : sinks) s = 2.0f * nd(rng);

  AttentionPlanBuilder plan;
  PlanOptions o;
  o.num_q_heads = hq;
  o.num_kv_heads = hkv;
  o.token_bucket = token_rows;
  plan.build(seqs, cursor, o);
  DeviceBuffer<float> d_q(q), d_k(k_pool), d_v(v_pool), d_sinks(sinks);
  DeviceBuffer<int32_t> d_table(table), d_blob(plan.blob());
  const size_t out_elems = size_t(token_rows) * hq * 64;
  DeviceBuffer<uint16_t> d_hi(std::vector<uint16_t>(out_elems, kPoisonBf16)),
      d_lo(std::vector<uint16_t>(out_elems, kPoisonBf16));
  PreciseAttentionArgs a;
  a.q = d_q.get();
  a.q_stride = q_stride;
  a.k_pool = d_k.get();
  a.v_pool = d_v.get();
  a.page_table = d_table.get();
  a.table_kind = kind;
  a.page_size = ps;
  a.sinks = c.sinks ? d_sinks.get() : nullptr;
  a.window = c.window;
  a.out_hi = reinterpret_cast<__nv_bfloat16*>(d_hi.get());
  a.out_lo = reinterpret_cast<__nv_bfloat16*>(d_lo.get());
  precise_sink_attention(a, plan.device_view(d_blob.get()), nullptr);
  ORCHID_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<uint16_t> hi = d_hi.download(), lo = d_lo.download();

  double err2 = 0, err2_hi = 0, ref2 = 0, worst = 0;
  size_t nan_or_unwritten = 0, stray = 0;
  const int group = hq / hkv;
  for (int i = 0; i < n; ++i) {
    const PlanSequence& s = seqs[size_t(i)];
    for (int j = 0; j < s.num_q; ++j) {
      const int t = s.q_start + j, pos = s.start_pos + j;
      const int lo_key = c.window > 0 ? std::max(0, pos - c.window + 1) : 0;
      for (int h = 0; h < hq; ++h) {
        double ref[64];
        reference::sink_attention_row(&q[size_t(t) * q_stride + size_t(h) * 64], k_log[size_t(i)],
                                      v_log[size_t(i)], hkv, h / group, lo_key, pos, 0.125,
                                      c.sinks ? &sinks[size_t(h)] : nullptr, ref);
        for (int d = 0; d < 64; ++d) {
          const size_t at = (size_t(t) * hq + h) * 64 + d;
          const double gh = bf16_to_float(hi[at]), got = gh + bf16_to_float(lo[at]);
          if (std::isnan(got)) {
            ++nan_or_unwritten;
            continue;
          }
          err2 += (got - ref[d]) * (got - ref[d]);
          err2_hi += (gh - ref[d]) * (gh - ref[d]);
          ref2 += ref[d] * ref[d];
          worst = std::max(worst, std::abs(got - ref[d]));
        }
      }
    }
  }
  for (size_t at = size_t(cursor) * hq * 64; at < out_elems; ++at)
    stray += hi[at] != kPoisonBf16 || lo[at] != kPoisonBf16;
  std::ostringstream name;
  name << "hq " << hq << " hkv " << hkv << " page " << ps << " window " << c.window << " seqs [";
  for (auto [nq, sp] : c.seqs) name << "(" << nq << "@" << sp << ")";
  name << "]";
  if (cursor == 0) {
    EXPECT_EQ(stray, 0u) << name.str();
    return;
  }
  const double rel = std::sqrt(err2 / ref2), rel_hi = std::sqrt(err2_hi / ref2);
  std::printf("    %s: rel L2 hi+lo %.2e (hi only %.2e), max abs %.2e, NaN %zu, stray %zu\n",
              name.str().c_str(), rel, rel_hi, worst, nan_or_unwritten, stray);
  EXPECT_EQ(nan_or_unwritten, 0u) << name.str();
  EXPECT_EQ(stray, 0u) << name.str();
  // hi + lo carries 16 significant bits (2^-17 relative, rms ~2.5e-6) on top of fp32 arithmetic.
  EXPECT_LT(rel, 6e-6) << name.str();
  EXPECT_LT(worst, 6e-5) << name.str();
  EXPECT_LT(rel_hi, 4e-3) << name.str();
}

class PreciseAttention : public ::testing::Test {
 protected:
  void SetUp() override { ORCHID_REQUIRE_GPU_OR_SKIP(); }
  uint64_t seed_ = orchid::testing::test_seed();
};

TEST_F(PreciseAttention, SlidingGptOssMixedPrefillDecode) {
  SCOPED_TRACE("ORCHID_TEST_SEED=" + std::to_string(seed_));
  Case c;
  c.seqs = {{200, 0}, {1, 127}, {1, 128}, {1, 5000}, {37, 300}, {0, 9}, {3, 126}};
  c.extra_tokens = 5;
  c.q_stride_pad = 2 * 8 * 64;  // q inside fp32 QKV rows
  run_case(c, seed_);
}

TEST_F(PreciseAttention, WindowsPagesAndGroups) {
  SCOPED_TRACE("ORCHID_TEST_SEED=" + std::to_string(seed_));
  uint64_t k = 0;
  for (int ps : {16, 64})
    for (int window : {0, 8, 128})
      for (auto [hq, hkv] : {std::pair{64, 8}, std::pair{8, 8}, std::pair{10, 2}, std::pair{64, 1}}) {
        Case c;
        c.hq = hq;
        c.hkv = hkv;
        c.page_size = ps;
        c.window = window;
        c.sinks = (k % 3) != 1;
        c.seqs = {{33, 0}, {1, 31}, {70, 65}, {1, 2}};
        c.extra_tokens = int(k % 2);
        run_case(c, seed_ + ++k);
      }
}

TEST_F(PreciseAttention, DecodeOnlySteps) {  // no prefill tile: the one-row-per-CTA launch
  SCOPED_TRACE("ORCHID_TEST_SEED=" + std::to_string(seed_));
  uint64_t k = 100;
  for (auto [hq, hkv] : {std::pair{64, 8}, std::pair{10, 2}, std::pair{64, 1}, std::pair{8, 8}})
    for (int window : {0, 128}) {
      Case c;
      c.hq = hq;
      c.hkv = hkv;
      c.window = window;
      c.seqs = {{1, 0}, {1, 127}, {1, 128}, {1, 700}, {1, 33}};
      c.extra_tokens = 3;
      c.q_stride_pad = 2 * hkv * 64;
      run_case(c, seed_ + ++k);
    }
}

TEST_F(PreciseAttention, SmallEmpty) {
  SCOPED_TRACE("ORCHID_TEST_SEED=" + std::to_string(seed_));
  Case c;
  run_case(c, seed_);  // nothing
  c.extra_tokens = 3;  // padding only
  run_case(c, seed_ + 1);
}

}  // namespace
}  // namespace orchid::kernels::attention
