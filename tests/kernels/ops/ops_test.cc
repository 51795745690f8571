// The small model kernels against plain host loops on random inputs.
#include "kernels/ops/ops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "core/dtypes.h"
#include "kernels/common/cuda_check.h"

namespace orchid::kernels::ops {
namespace {

template <typename T>
struct Dev {
  T* p = nullptr;
  explicit Dev(size_t n) { ORCHID_CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T))); }
  Dev(const std::vector<T>& v) : Dev(v.size()) {
    ORCHID_CUDA_CHECK(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  ~Dev() { cudaFree(p); }
  std::vector<T> get(size_t n) const {
    std::vector<T> v(n);
    ORCHID_CUDA_CHECK(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
    return v;
  }
};

class Ops : public ::testing::Test {
 protected:
  void SetUp() override {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) GTEST_SKIP() << "no GPU";
  }
  std::mt19937 rng{42};
};

TEST_F(Ops, EmbeddingGatherAndRowGather) {
  const int64_t V = 1000, H = 2880, T = 37;
  std::vector<uint16_t> table(size_t(V * H));
  std::normal_distribution<float> nd;
  for (auto& b : table) b = float_to_bf16(nd(rng));
  std::vector<int32_t> ids(T);
  for (auto& id : ids) id = int32_t(rng() % V);
  Dev<uint16_t> dt(table);
  Dev<int32_t> di(ids);
  Dev<float> dx(size_t(T * H));
  embedding_gather(reinterpret_cast<const __nv_bfloat16*>(dt.p), di.p, dx.p, T, H, nullptr);
  auto x = dx.get(size_t(T * H));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t c = 0; c < H; ++c)
      ASSERT_EQ(x[size_t(t * H + c)], bf16_to_float(table[size_t(ids[size_t(t)] * H + c)]));
  std::vector<int32_t> sel = {36, 0, 5, 5};
  Dev<int32_t> ds(sel);
  Dev<float> dg(sel.size() * size_t(H));
  gather_rows_f32(dx.p, ds.p, dg.p, int64_t(sel.size()), H, nullptr);
  auto g = dg.get(sel.size() * size_t(H));
  for (size_t r = 0; r < sel.size(); ++r)
    for (int64_t c = 0; c < H; ++c) ASSERT_EQ(g[r * size_t(H) + size_t(c)], x[size_t(sel[r] * H + c)]);
}

// Many page copies in one launch: 70000 spans (more than one grid's worth of blocks) of 16 B .. 16 KB in a
// shuffled order between two buffers; every copied byte lands, nothing else is touched.
TEST_F(Ops, CopySpans) {
  const size_t n = 70000, unit = 16;
  std::vector<uint64_t> sizes(n), src_at(n), dst_at(n);
  size_t total = 0;
  for (size_t i = 0; i < n; ++i) {
    sizes[i] = unit * (1 + rng() % (i % 100 == 0 ? 1024 : 8));
    src_at[i] = total;
    total += sizes[i];
  }
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), rng);
  size_t at = 0;
  for (size_t k = 0; k < n; ++k) {
    dst_at[order[k]] = at;
    at += sizes[order[k]];
  }
  std::vector<uint8_t> src(total), poison(total + 64, 0xAB);
  for (auto& b : src) b = uint8_t(rng());
  Dev<uint8_t> ds(src), dd(poison);
  std::vector<CopySpan> spans(n);
  for (size_t i = 0; i < n; ++i) spans[i] = {ds.p + src_at[i], dd.p + dst_at[i], sizes[i]};
  Dev<CopySpan> dspans(spans);
  copy_spans(dspans.p, int64_t(n), nullptr);
  ORCHID_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<uint8_t> got = dd.get(total + 64);
  for (size_t i = 0; i < n; ++i)
    ASSERT_EQ(std::memcmp(got.data() + dst_at[i], src.data() + src_at[i], sizes[i]), 0) << "span " << i;
  for (size_t b = total; b < total + 64; ++b) ASSERT_EQ(got[b], 0xAB) << "byte " << b << " past the spans";
  copy_spans(dspans.p, 0, nullptr);  // nothing to do
  ORCHID_CUDA_CHECK(cudaDeviceSynchronize());
}

TEST_F(Ops, ScatterTokens) {
  // The step before drew 300 rows; 257 tokens of this step (of 1000) take one of them each, read plainly
  // and from rows of 5 words (the sampler's results); the other tokens stay.
  const int64_t rows = 300, n = 257, T = 1000;
  for (const int64_t stride : {int64_t(1), int64_t(5)}) {
    std::vector<int32_t> src(size_t(rows * stride)), tokens(T), pairs;
    for (auto& v : src) v = int32_t(rng() % 200000);
    for (auto& v : tokens) v = int32_t(rng() % 200000);
    std::vector<int32_t> dst(T);
    for (int64_t t = 0; t < T; ++t) dst[size_t(t)] = int32_t(t);
    std::shuffle(dst.begin(), dst.end(), rng);
    std::vector<int32_t> want = tokens;
    for (int64_t i = 0; i < n; ++i) {
      const int32_t from = int32_t(rng() % rows);
      pairs.push_back(dst[size_t(i)]);
      pairs.push_back(from);
      want[size_t(dst[size_t(i)])] = src[size_t(from * stride)];
    }
    Dev<int32_t> dsrc(src), dpairs(pairs), dtokens(tokens);
    scatter_tokens(dsrc.p, stride, dpairs.p, n, dtokens.p, nullptr);
    scatter_tokens(dsrc.p, stride, dpairs.p, 0, dtokens.p, nullptr);  // nothing to do
    ORCHID_CUDA_CHECK(cudaDeviceSynchronize());
    EXPECT_EQ(dtokens.get(size_t(T)), want) << "stride " << stride;
  }
}

TEST_F(Ops, Conversions) {
  const int64_t n = 100003;
  std::vector<float> f(n);
  std::normal_distribution<float> nd(0, 10);
  for (auto& v : f) v = nd(rng);
  Dev<float> df(f);
  Dev<uint16_t> db(static_cast<size_t>(n));
  f32_to_bf16(df.p, reinterpret_cast<__nv_bfloat16*>(db.p), n, nullptr);
  auto b = db.get(size_t(n));
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(b[size_t(i)], float_to_bf16(f[size_t(i)])) << i;
  Dev<float> back(static_cast<size_t>(n));
  bf16_to_f32(reinterpret_cast<const __nv_bfloat16*>(db.p), back.p, n, nullptr);
  auto r = back.get(size_t(n));
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(r[size_t(i)], bf16_to_float(b[size_t(i)]));
}

// The sums behind the collectives of ranks sharing a device: the exact fp32 order (bitwise), and add_f32.
TEST_F(Ops, SumInRankOrderAndAdd) {
  const int64_t n = 1000003;
  std::normal_distribution<float> nd(0, 3);
  for (int count : {1, 2, 3, 8, 16}) {
    std::vector<std::vector<float>> host(static_cast<size_t>(count),
                                         std::vector<float>(static_cast<size_t>(n)));
    std::vector<std::unique_ptr<Dev<float>>> dev;
    SumSources src{};
    for (int r = 0; r < count; ++r) {
      for (auto& v : host[size_t(r)]) v = nd(rng);
      dev.push_back(std::make_unique<Dev<float>>(host[size_t(r)]));
      src.p[r] = dev.back()->p;
    }
    Dev<float> out(static_cast<size_t>(n));
    sum_f32(src, count, n, out.p, nullptr);
    const auto got = out.get(size_t(n));
    for (int64_t i = 0; i < n; ++i) {
      float want = host[0][size_t(i)];
      for (int r = 1; r < count; ++r) want += host[size_t(r)][size_t(i)];
      ASSERT_EQ(got[size_t(i)], want) << count << " buffers, element " << i;
    }
    if (count == 2) {
      add_f32(dev[0]->p, dev[1]->p, n, nullptr);
      const auto x = dev[0]->get(size_t(n));
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(x[size_t(i)], host[0][size_t(i)] + host[1][size_t(i)]) << i;
    }
  }
}

// Rows 1 and 5 (one row spread over a cluster of 8 blocks), 70 (a block a row); gpt-oss's vocabulary (whole
// float4 slices) and an odd draft-sized one (scalar slices).
TEST_F(Ops, GreedyPickWithTiesAndLogprob) {
  for (const auto& [rows, V] :
       {std::pair<int64_t, int64_t>{5, 201088}, {1, 201088}, {70, 201088}, {3, 32003}}) {
    std::vector<float> logits(size_t(rows * V));
    std::normal_distribution<float> nd(0, 3);
    for (auto& v : logits) v = nd(rng);
    for (int64_t i = 0; i < 3000; i += 3) logits[size_t(i)] = -INFINITY;  // masked ids before the max
    logits[size_t(0 * V + 7)] = 50.0f;                                    // a tie: the lower id must win
    logits[size_t(0 * V + V / 2 + 3)] = 50.0f;
    if (rows > 2) logits[size_t(2 * V + V - 1)] = 60.0f;  // the last id
    Dev<float> dl(logits);
    Dev<int32_t> di(static_cast<size_t>(rows));
    Dev<float> dp(static_cast<size_t>(rows));
    greedy_pick(dl.p, rows, V, di.p, dp.p, nullptr);
    auto ids = di.get(size_t(rows));
    auto lp = dp.get(size_t(rows));
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = logits.data() + r * V;
      int64_t best = 0;
      for (int64_t i = 1; i < V; ++i)
        if (row[i] > row[best]) best = i;
      double sum = 0;
      for (int64_t i = 0; i < V; ++i) sum += std::exp(double(row[i]) - row[best]);
      EXPECT_EQ(ids[size_t(r)], best) << rows << " rows of " << V << ", row " << r;
      EXPECT_NEAR(lp[size_t(r)], -std::log(sum), 1e-4) << rows << " rows of " << V << ", row " << r;
    }
    EXPECT_EQ(ids[0], 7);
    if (rows > 2) {
      EXPECT_EQ(ids[2], V - 1);
    }
  }
}

}  // namespace
}  // namespace orchid::kernels::ops
