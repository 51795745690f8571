// The fused QKV projection + bias + RoPE + paged KV write for a few tokens (qkv_rope_gemm.h) against the
// references: the projection in double (rounded to fp32 once), then attention_reference.h's fp32 row
// transform. Decode steps of 1, 3 (+ a padding token) and 8 tokens at positions up to 131071, a prefill
// chunk of 5 tokens of one sequence, page sizes 16 and 64, full and sliding tables, a page marked kNoPage,
// gpt-oss's head counts (64 / 8) and a tensor-parallel rank's (8 / 1). Every element of q_out and both pools
// is checked: written ones within a bf16 rounding of the reference, all others still holding the poison.
#include "kernels/attention/qkv_rope_gemm.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "kernels/attention/attention_plan.h"
#include "kernels/attention/kv_layout.h"
#include "kernels/attention/yarn.h"
#include "model/config.h"
#include "tests/kernels/attention/attention_reference.h"
#include "tests/kernels/attention/paged_step.h"
#include "tests/kernels/gpu_test_util.h"

namespace orchid::kernels::attention {
namespace {

using orchid::testing::DeviceBuffer;
using orchid::testing::kPoisonBf16;

struct FusedCase {
  std::string name;
  int hq = 64, hkv = 8, hidden = 2880, page_size = 16;
  TableKind kind = kFullTable;
  std::vector<std::pair<int, int>> seqs;  // (num_q, start_pos)
  int extra_tokens = 0;                   // padding rows of the bucket
  bool drop_a_page = false;               // the first page holding new tokens marked kNoPage
  bool bias = true;
};

void run_case(const FusedCase& fc, uint64_t seed) {
  SCOPED_TRACE(fc.name);
  std::mt19937_64 rng(seed);
  const int hq = fc.hq, hkv = fc.hkv, H = fc.hidden, ps = fc.page_size;
  const int width = (hq + 2 * hkv) * 64;
  model::ModelConfig cfg = model::preset_config("20b");
  cfg.head_dim = 64;
  const RopeFrequencies freqs = yarn_inv_freq(cfg);

  const PagedStep step = make_paged_step(fc.seqs, ps, fc.kind, fc.drop_a_page, rng);
  const std::vector<PlanSequence>& seqs = step.seqs;
  const std::vector<int32_t>& table = step.table;
  const int num_pages = step.num_pages, num_tokens = step.num_tokens;
  const int token_rows = num_tokens + fc.extra_tokens;

  const std::vector<uint16_t> x = orchid::testing::random_bf16(rng, size_t(token_rows) * H, 1.0f);
  const std::vector<uint16_t> w =
      orchid::testing::random_bf16(rng, size_t(width) * H, 1.0f / std::sqrt(float(H)));
  std::vector<float> bias(static_cast<size_t>(width));
  std::normal_distribution<float> bd(0.0f, 0.5f);
  for (auto& b : bias) b = bd(rng);

  const AttentionPlanBuilder plan = plan_step(step, hq, hkv, token_rows);

  const size_t pool_elems = kv_pool_elements(num_pages, hkv, ps);
  DeviceBuffer<uint16_t> d_x(x), d_w(w);
  DeviceBuffer<float> d_bias(bias);
  DeviceBuffer<uint16_t> d_q(std::vector<uint16_t>(size_t(token_rows) * hq * 64, kPoisonBf16));
  DeviceBuffer<uint16_t> d_k(std::vector<uint16_t>(pool_elems, kPoisonBf16));
  DeviceBuffer<uint16_t> d_v(std::vector<uint16_t>(pool_elems, kPoisonBf16));
  DeviceBuffer<int32_t> d_table(table), d_blob(plan.blob());

  QkvRopeGemmArgs a;
  a.hidden = H;
  a.x = reinterpret_cast<const __nv_bfloat16*>(d_x.get());
  a.w = reinterpret_cast<const __nv_bfloat16*>(d_w.get());
  a.bias = fc.bias ? d_bias.get() : nullptr;
  std::copy(freqs.inv_freq.begin(), freqs.inv_freq.end(), a.rope.inv_freq);
  a.rope.concentration = freqs.concentration;
  a.q_out = reinterpret_cast<__nv_bfloat16*>(d_q.get());
  a.k_pool = reinterpret_cast<__nv_bfloat16*>(d_k.get());
  a.v_pool = reinterpret_cast<__nv_bfloat16*>(d_v.get());
  a.page_table = d_table.get();
  a.table_kind = fc.kind;
  a.page_size = ps;
  const AttentionPlan view = plan.device_view(d_blob.get());
  ASSERT_TRUE(qkv_rope_gemm_supports(a, view));
  qkv_rope_gemm(a, view, nullptr);
  ORCHID_CUDA_CHECK(cudaGetLastError());
  ORCHID_CUDA_CHECK(cudaDeviceSynchronize());

  // Expected images: NaN (= must stay poison) everywhere except what the reference writes.
  const double kUnwritten = std::nan("");
  std::vector<double> q_want(size_t(token_rows) * hq * 64, kUnwritten);
  std::vector<double> k_want(pool_elems, kUnwritten), v_want(pool_elems, kUnwritten);
  const std::vector<float> xf = orchid::testing::bf16_to_floats(x), wf = orchid::testing::bf16_to_floats(w);
  std::vector<float> row(static_cast<size_t>(width)), qf(size_t(hq) * 64), kf(size_t(hkv) * 64),
      vf(size_t(hkv) * 64);
  for (const PlanSequence& s : seqs) {
    for (int i = 0; i < s.num_q; ++i) {
      const int t = s.q_start + i, pos = s.start_pos + i;
      reference::parallel_for(size_t(width), [&](size_t col) {
        double acc = 0;
        for (int k = 0; k < H; ++k) acc += double(xf[size_t(t) * H + k]) * double(wf[col * H + k]);
        row[col] = float(acc);
      });
      reference::qkv_rope_row_f32(row.data(), fc.bias ? bias.data() : nullptr, pos, freqs, hq, hkv, qf.data(),
                                  kf.data(), vf.data());
      for (size_t e = 0; e < qf.size(); ++e) q_want[size_t(t) * hq * 64 + e] = qf[e];
      const int trow = fc.kind == kFullTable ? s.full_table_begin : s.sliding_table_begin;
      const int32_t page = table[size_t(trow + pos / ps)];
      if (page < 0) continue;
      for (int h = 0; h < hkv; ++h)
        for (int d = 0; d < 64; ++d) {
          const size_t at = kv_offset(page, h, pos % ps, hkv, log2_exact(ps)) + size_t(d);
          k_want[at] = kf[size_t(h) * 64 + d];
          v_want[at] = vf[size_t(h) * 64 + d];
        }
    }
  }
  // Written elements: within a bf16 rounding (2^-8 relative) of the fp32 reference, plus the fp32 sums'
  // order (absolute 1e-3 on values of order 1). Unwritten ones: the poison, bit for bit.
  auto check = [&](const char* what, const std::vector<uint16_t>& got, const std::vector<double>& want) {
    std::vector<float> g(got.size());
    size_t poison_kept = 0, poison_bad = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      g[i] = bf16_to_float(got[i]);
      if (std::isnan(want[i])) (got[i] == kPoisonBf16 ? poison_kept : poison_bad)++;
    }
    const auto c = orchid::testing::compare(
        g, want, 1e-3, 1.0 / 256, [&](size_t i) { return !std::isnan(want[i]); },
        [&](size_t i) { return std::string(what) + " element " + std::to_string(i); });
    EXPECT_TRUE(c.ok(4e-3)) << what << ": " << c.summary();
    EXPECT_GT(c.count, 0u) << what;
    EXPECT_EQ(poison_bad, 0u) << what << ": elements written that the reference does not write";
  };
  check("q_out", d_q.download(), q_want);
  check("k_pool", d_k.download(), k_want);
  check("v_pool", d_v.download(), v_want);
}

class QkvRopeGemm : public ::testing::Test {
 protected:
  void SetUp() override { ORCHID_REQUIRE_GPU_OR_SKIP(); }
  uint64_t seed_ = orchid::testing::test_seed();
};

TEST_F(QkvRopeGemm, DecodeStepsOfGptOss) {
  SCOPED_TRACE("ORCHID_TEST_SEED=" + std::to_string(seed_));
  FusedCase one{"one decode", 64, 8, 2880, 16, kFullTable, {{1, 100}}};
  run_case(one, seed_);
  FusedCase three{"three decodes and a padding row, sliding table, 64-token pages",
                  64,
                  8,
                  2880,
                  64,
                  kSlidingTable,
                  {{1, 5}, {1, 70000}, {1, 131071}},
                  1};
  run_case(three, seed_ + 1);
  FusedCase eight{
      "eight decodes, one page dropped, no bias", 64, 8, 2880, 16, kFullTable, {}, 0, true, false};
  for (int i = 0; i < 8; ++i) eight.seqs.push_back({1, 37 * i * i + 3});
  run_case(eight, seed_ + 2);
}

TEST_F(QkvRopeGemm, ChunkAndRankShapes) {
  SCOPED_TRACE("ORCHID_TEST_SEED=" + std::to_string(seed_));
  FusedCase chunk{
      "a 5-token chunk of one sequence across a page edge", 64, 8, 2880, 16, kFullTable, {{5, 30}}};
  run_case(chunk, seed_ + 3);
  FusedCase rank{"a tensor-parallel rank's heads (8 / 1), hidden 256",
                 8,
                 1,
                 256,
                 16,
                 kFullTable,
                 {{2, 14}, {1, 4096}},
                 2};
  run_case(rank, seed_ + 4);
}

TEST(QkvRopeGemmSupports, TokenCountAndShape) {
  AttentionPlan plan;
  plan.num_q_heads = 64;
  plan.num_kv_heads = 8;
  QkvRopeGemmArgs a;
  a.hidden = 2880;
  a.page_size = 16;
  plan.num_tokens = 8;
  EXPECT_TRUE(qkv_rope_gemm_supports(a, plan));
  plan.num_tokens = 9;
  EXPECT_FALSE(qkv_rope_gemm_supports(a, plan));
  plan.num_tokens = 0;
  EXPECT_FALSE(qkv_rope_gemm_supports(a, plan));
  plan.num_tokens = 1;
  a.hidden = 2888;
  EXPECT_FALSE(qkv_rope_gemm_supports(a, plan));
  a.hidden = 2880;
  a.page_size = 24;
  EXPECT_FALSE(qkv_rope_gemm_supports(a, plan));
}

}  // namespace
}  // namespace orchid::kernels::attention
