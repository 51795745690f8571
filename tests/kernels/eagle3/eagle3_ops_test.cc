// The EAGLE-3 head's own kernels (kernels/eagle3/eagle3_ops.h) against fp64 references on random inputs: the
// RoPE + K/V write through a shuffled page table (GQA groups 1/4/8, pages of 4 and 16; every slot not written
// must keep its NaN poison, every written one its rotated K or copied V), and silu(gate) * up. The head's
// attention is the target's kernel (attention tests), its GEMMs cuBLASLt's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "../gpu_test_util.h"
#include "kernels/eagle3/eagle3_ops.h"

namespace orchid::kernels::eagle3 {
namespace {

using orchid::testing::bf16_to_floats;
using orchid::testing::compare;
using orchid::testing::DeviceBuffer;
using orchid::testing::random_bf16;

struct Shape {
  int hq, hkv, page_size, pages;
};

class Eagle3Ops : public ::testing::TestWithParam<Shape> {};

TEST_P(Eagle3Ops, RopeKvWriteMatchesTheReference) {
  ORCHID_REQUIRE_GPU_OR_SKIP();
  const Shape p = GetParam();
  const uint64_t seed = orchid::testing::test_seed();
  SCOPED_TRACE("ORCHID_TEST_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const int D = kHeadDim, L = 3 * p.page_size + 3;  // a sequence of L positions, one row each
  std::vector<int32_t> table(size_t(p.pages));
  for (int i = 0; i < p.pages; ++i) table[size_t(i)] = i;
  std::shuffle(table.begin(), table.end(), rng);
  std::vector<HeadRow> rows;
  for (int pos = 0; pos < L; ++pos) rows.push_back({pos, 0});
  const int n = int(rows.size()), width = (p.hq + 2 * p.hkv) * D;
  const std::vector<uint16_t> qkv = random_bf16(rng, size_t(n * width), 1.0f);
  RopeFreqs f{};
  for (int j = 0; j < D / 2; ++j) f.inv_freq[j] = float(std::pow(10000.0, -2.0 * j / D));
  f.concentration = 1.25f;
  const size_t pool = size_t(p.pages) * p.hkv * p.page_size * D;
  DeviceBuffer<uint16_t> d_qkv(qkv), d_q(size_t(n * p.hq * D));
  DeviceBuffer<uint16_t> kp(std::vector<uint16_t>(pool, orchid::testing::kPoisonBf16)),
      vp(std::vector<uint16_t>(pool, orchid::testing::kPoisonBf16));
  DeviceBuffer<int32_t> d_table(table);
  DeviceBuffer<HeadRow> d_rows(rows);
  HeadKv kv;
  kv.k_pool = reinterpret_cast<__nv_bfloat16*>(kp.get());
  kv.v_pool = reinterpret_cast<__nv_bfloat16*>(vp.get());
  kv.page_table = d_table.get();
  kv.page_size = p.page_size;
  kv.num_pages = p.pages;
  kv.num_q_heads = p.hq;
  kv.num_kv_heads = p.hkv;
  rope_kv_write(reinterpret_cast<const __nv_bfloat16*>(d_qkv.get()), d_rows.get(), n, f, kv,
                reinterpret_cast<__nv_bfloat16*>(d_q.get()), nullptr);
  ORCHID_CUDA_CHECK(cudaDeviceSynchronize());

  const std::vector<float> in = bf16_to_floats(qkv);
  auto rotated = [&](int r, int head, int d) {
    const int j = d % (D / 2);
    const float angle = float(rows[size_t(r)].pos) * f.inv_freq[j];
    const double c = std::cos(double(angle)) * f.concentration, s = std::sin(double(angle)) * f.concentration;
    const double a = in[size_t(r * width + head * D + j)], b = in[size_t(r * width + head * D + j + D / 2)];
    return d < D / 2 ? a * c - b * s : b * c + a * s;
  };
  std::vector<double> q_ref(size_t(n * p.hq * D)), k_ref(pool, std::nan("")), v_ref(pool, std::nan(""));
  for (int r = 0; r < n; ++r) {
    for (int h = 0; h < p.hq; ++h)
      for (int d = 0; d < D; ++d) q_ref[size_t((r * p.hq + h) * D + d)] = rotated(r, h, d);
    const int pos = rows[size_t(r)].pos, page = table[size_t(pos / p.page_size)], slot = pos % p.page_size;
    for (int h = 0; h < p.hkv; ++h)
      for (int d = 0; d < D; ++d) {
        const size_t at = ((size_t(page) * p.hkv + h) * p.page_size + slot) * D + d;
        k_ref[at] = rotated(r, p.hq + h, d);
        v_ref[at] = in[size_t(r * width + (p.hq + p.hkv + h) * D + d)];
      }
  }
  const auto cq = compare(bf16_to_floats(d_q.download()), q_ref, 2e-2, 1e-2);
  EXPECT_TRUE(cq.ok(5e-3)) << "q: " << cq.summary();
  for (const auto& [name, buf, ref] : {std::tuple{"k", &kp, &k_ref}, std::tuple{"v", &vp, &v_ref}}) {
    const std::vector<float> got = bf16_to_floats(buf->download());
    size_t written = 0, stray = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      if (std::isnan((*ref)[i]))
        stray += std::isnan(got[i]) ? 0 : 1;
      else
        ++written;
    }
    EXPECT_EQ(stray, 0u) << name << ": slots written that no row owns";
    EXPECT_EQ(written, size_t(n * p.hkv * D)) << name;
    const auto c = compare(got, *ref, 2e-2, 1e-2, [&](size_t i) { return !std::isnan((*ref)[i]); });
    EXPECT_TRUE(c.ok(5e-3)) << name << ": " << c.summary();
  }
}

TEST(Eagle3OpsMlp, SiluMulMatchesTheReference) {
  ORCHID_REQUIRE_GPU_OR_SKIP();
  const uint64_t seed = orchid::testing::test_seed();
  SCOPED_TRACE("ORCHID_TEST_SEED=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const int rows = 37, inter = 200;
  const std::vector<uint16_t> gu = random_bf16(rng, size_t(rows * 2 * inter), 2.0f);
  DeviceBuffer<uint16_t> d_gu(gu), d_act(size_t(rows * inter));
  silu_mul(reinterpret_cast<const __nv_bfloat16*>(d_gu.get()), rows, inter,
           reinterpret_cast<__nv_bfloat16*>(d_act.get()), nullptr);
  ORCHID_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> in = bf16_to_floats(gu);
  std::vector<double> ref(size_t(rows * inter));
  for (int r = 0; r < rows; ++r)
    for (int i = 0; i < inter; ++i) {
      const double g = in[size_t(r * 2 * inter + i)], u = in[size_t(r * 2 * inter + inter + i)];
      ref[size_t(r * inter + i)] = g / (1.0 + std::exp(-g)) * u;
    }
  const auto c = compare(bf16_to_floats(d_act.download()), ref, 2e-2, 1e-2);
  EXPECT_TRUE(c.ok(5e-3)) << c.summary();
}

INSTANTIATE_TEST_SUITE_P(Shapes, Eagle3Ops,
                         ::testing::Values(Shape{8, 8, 16, 6}, Shape{8, 2, 4, 20}, Shape{64, 8, 16, 6}));

}  // namespace
}  // namespace orchid::kernels::eagle3
