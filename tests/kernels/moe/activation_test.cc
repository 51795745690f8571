// Gather (+FP8 1x128 quantization), bias + clamped SwiGLU (bf16 and FP8 outputs) and the weighted combine
// vs CPU references, with permutations from the routing reference (odd token counts, a single token).
#include "kernels/moe/moe_activation.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "kernel_reference.h"
#include "kernel_test_util.h"
#include "kernels/norm/rmsnorm.h"

namespace orchid::kernels {
namespace {

using orchid::testing::DeviceBuffer;

std::string case_name(const char* prefix, int tokens) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%s%d", prefix, tokens);
  return buf;
}

// A random routing of T tokens over E experts (k distinct experts per token) and its permutation.
orchid::ref::Permutation random_routing(std::mt19937_64& rng, int T, int E, int K, std::vector<int>* idx,
                                        std::vector<float>* w) {
  idx->resize(size_t(T) * K);
  w->resize(size_t(T) * K);
  std::uniform_real_distribution<float> u(0.05f, 1.0f);
  for (int t = 0; t < T; ++t) {
    std::vector<int> perm(E);
    for (int e = 0; e < E; ++e) perm[e] = e;
    std::shuffle(perm.begin(), perm.end(), rng);
    for (int j = 0; j < K; ++j) {
      (*idx)[size_t(t) * K + j] = perm[j];
      (*w)[size_t(t) * K + j] = u(rng);
    }
  }
  return orchid::ref::permute(idx->data(), T, E, K);
}

class ActivationTest : public ::testing::TestWithParam<int> {};  // token count

// Sets the form of the FP8 quantizers (moe_set_quant_by_rows) for a scope; the default form after it.
class QuantForms {
 public:
  explicit QuantForms(bool by_rows) { moe_set_quant_by_rows(by_rows); }
  ~QuantForms() { moe_set_quant_by_rows(true); }
};

void gather_and_quantize_fp8(int T, bool by_rows);
void swiglu_bf16_and_fp8(int T, bool by_rows);

TEST_P(ActivationTest, GatherAndQuantizeFp8) {
  ORCHID_REQUIRE_GPU_OR_SKIP();
  for (const bool by_rows : {false, true}) {
    SCOPED_TRACE(by_rows ? "by rows" : "a warp a group");
    const QuantForms forms(by_rows);
    gather_and_quantize_fp8(GetParam(), by_rows);
    gather_and_quantize_fp8(GetParam() * 2 + 1, by_rows);  // other row counts (rows are blocks there)
  }
}

void gather_and_quantize_fp8(int T, bool by_rows) {
  const int E = 32, K = 4, H = 2880, Hp = round_up_128(H), M = T * K;
  std::mt19937_64 rng(orchid::testing::named_seed(case_name("gather_fp8_t", T).c_str()) + (by_rows ? 1 : 0));
  std::vector<int> idx;
  std::vector<float> w;
  const auto p = random_routing(rng, T, E, K, &idx, &w);
  auto h = orchid::testing::random_bf16(rng, size_t(T) * H, 1.5f);
  for (int c = 0; c < H; ++c) h[c] = 0;  // token 0 is all zeros: scale 1, q 0
  const auto hf = orchid::testing::bf16_to_floats(h);
  DeviceBuffer<uint16_t> dh;
  DeviceBuffer<int> drt;
  dh.upload(h);
  drt.upload(p.row_token);
  DeviceBuffer<uint8_t> q(size_t(M) * Hp);
  DeviceBuffer<float> s(size_t(M) * (Hp / 128));
  orchid::testing::poison(q);
  orchid::testing::poison(s);
  moe_gather_quant_fp8(dh.get(), drt.get(), M, H, q.get(), s.get(), nullptr);
  DeviceBuffer<uint16_t> gb(size_t(M) * H);
  orchid::testing::poison(gb);
  moe_gather_bf16(dh.get(), drt.get(), M, H, gb.get(), nullptr);
  ORCHID_TEST_CUDA(cudaDeviceSynchronize());
  std::vector<uint8_t> rq(q.size());
  std::vector<float> rs(s.size());
  std::vector<uint16_t> rb(gb.size());
  for (int r = 0; r < M; ++r) {
    const int t = p.row_token[r];
    orchid::ref::quant_fp8_row(&hf[size_t(t) * H], H, &rq[size_t(r) * Hp], &rs[size_t(r) * (Hp / 128)]);
    std::copy(h.begin() + size_t(t) * H, h.begin() + size_t(t + 1) * H, rb.begin() + size_t(r) * H);
  }
  EXPECT_TRUE(orchid::testing::check_exact("gather+quant fp8 q", q.download(), rq));
  std::vector<double> rsd(rs.begin(), rs.end());
  EXPECT_TRUE(orchid::testing::check_close("gather+quant fp8 scales", s.download(), rsd, 0, 0, 0));
  EXPECT_TRUE(orchid::testing::check_exact("gather bf16", gb.download(), rb));
}

TEST_P(ActivationTest, SwigluBf16AndFp8) {
  ORCHID_REQUIRE_GPU_OR_SKIP();
  for (const bool by_rows : {false, true}) {
    SCOPED_TRACE(by_rows ? "by rows" : "a warp a group");
    const QuantForms forms(by_rows);
    swiglu_bf16_and_fp8(GetParam(), by_rows);
  }
}

void swiglu_bf16_and_fp8(int T, bool by_rows) {
  const int E = 32, K = 4, I = 2880, Ip = round_up_128(I), M = T * K;
  const SwigluParams sp;
  std::mt19937_64 rng(orchid::testing::named_seed(case_name("swiglu_t", T).c_str()) + (by_rows ? 1 : 0));
  std::vector<int> idx;
  std::vector<float> w;
  const auto p = random_routing(rng, T, E, K, &idx, &w);
  // Spread wide enough to hit both clamps (|u| > 7).
  auto u = orchid::testing::random_bf16(rng, size_t(M) * 2 * I, 5.0f);
  auto b1 = orchid::testing::random_bf16(rng, size_t(E) * 2 * I, 1.0f);
  const auto uf = orchid::testing::bf16_to_floats(u), bf = orchid::testing::bf16_to_floats(b1);
  std::vector<float> zf(size_t(M) * I);
  for (int r = 0; r < M; ++r) {
    const int e = p.row_expert[r];
    for (int i = 0; i < I; ++i) {
      const float g = uf[size_t(r) * 2 * I + 2 * i] + bf[size_t(e) * 2 * I + 2 * i];
      const float l = uf[size_t(r) * 2 * I + 2 * i + 1] + bf[size_t(e) * 2 * I + 2 * i + 1];
      zf[size_t(r) * I + i] = orchid::ref::swiglu(g, l, sp.limit, sp.alpha);
    }
  }
  DeviceBuffer<uint16_t> du, db;
  DeviceBuffer<int> dre;
  du.upload(u);
  db.upload(b1);
  dre.upload(p.row_expert);
  DeviceBuffer<uint16_t> zb(size_t(M) * I);
  DeviceBuffer<uint8_t> zq(size_t(M) * Ip);
  DeviceBuffer<float> zs(size_t(M) * (Ip / 128));
  orchid::testing::poison(zb);
  orchid::testing::poison(zq);
  orchid::testing::poison(zs);
  moe_swiglu_bf16(du.get(), db.get(), dre.get(), M, I, sp, zb.get(), nullptr);
  moe_swiglu_fp8(du.get(), db.get(), dre.get(), M, I, sp, zq.get(), zs.get(), nullptr);
  ORCHID_TEST_CUDA(cudaDeviceSynchronize());

  // bf16: the device's expf may differ from libm's by an ulp, so allow one bf16 rounding step.
  std::vector<double> zd(zf.begin(), zf.end());
  EXPECT_TRUE(orchid::testing::check_close("swiglu bf16", orchid::testing::bf16_to_floats(zb.download()), zd,
                                           1e-6, 1.0 / 128, 4e-3));
  // fp8: scales to fp32 rounding; codes equal except (rarely) one step apart where z sits on a rounding
  // boundary and the two expf differ.
  std::vector<uint8_t> rq(zq.size());
  std::vector<float> rs(zs.size());
  for (int r = 0; r < M; ++r)
    orchid::ref::quant_fp8_row(&zf[size_t(r) * I], I, &rq[size_t(r) * Ip], &rs[size_t(r) * (Ip / 128)]);
  std::vector<double> rsd(rs.begin(), rs.end());
  EXPECT_TRUE(orchid::testing::check_close("swiglu fp8 scales", zs.download(), rsd, 0, 1e-6, 1e-6));
  const auto gq = zq.download();
  int64_t diff = 0, far = 0;
  for (size_t i = 0; i < gq.size(); ++i) {
    if (gq[i] == rq[i]) continue;
    ++diff;
    if (std::abs(int(gq[i] & 0x7f) - int(rq[i] & 0x7f)) > 1 || ((gq[i] ^ rq[i]) & 0x80)) ++far;
  }
  std::printf("[check] swiglu fp8 codes: %lld of %zu differ (all must be one step apart: %lld are not)\n",
              (long long)diff, gq.size(), (long long)far);
  EXPECT_EQ(far, 0);
  EXPECT_LE(double(diff), 1e-4 * double(gq.size()) + 2);
}

// A combine's inputs for T tokens (E = 32 experts, k = 4, H = 2880): a random routing, expert outputs y,
// biases b2 and the residual x, on the host and (but x) on the device.
struct CombineProblem {
  static constexpr int E = 32, K = 4, H = 2880;
  int T = 0;
  std::vector<int> idx;
  std::vector<float> w, x;
  orchid::ref::Permutation perm;
  std::vector<uint16_t> y, b2;
  DeviceBuffer<uint16_t> dy, db;
  DeviceBuffer<int> didx, dsr;
  DeviceBuffer<float> dw;

  CombineProblem(const char* name, int tokens) : T(tokens) {
    std::mt19937_64 rng(orchid::testing::named_seed(case_name(name, T).c_str()));
    perm = random_routing(rng, T, E, K, &idx, &w);
    y = orchid::testing::random_bf16(rng, size_t(T) * K * H, 1.0f);
    b2 = orchid::testing::random_bf16(rng, size_t(E) * H, 0.3f);
    x.resize(size_t(T) * H);
    std::normal_distribution<float> nd(0.0f, 3.0f);
    for (auto& v : x) v = nd(rng);
    dy.upload(y);
    db.upload(b2);
    didx.upload(idx);
    dsr.upload(perm.slot_row);
    dw.upload(w);
  }
  void combine(float* dx) {
    moe_combine(dy.get(), db.get(), didx.get(), dw.get(), dsr.get(), T, K, H, dx, nullptr);
  }
};

std::vector<uint32_t> bits_of(const std::vector<float>& v) {
  std::vector<uint32_t> b(v.size());
  std::memcpy(b.data(), v.data(), v.size() * 4);
  return b;
}

TEST_P(ActivationTest, CombineWeightedInOrder) {
  ORCHID_REQUIRE_GPU_OR_SKIP();
  CombineProblem pr("combine_t", GetParam());
  const int T = pr.T, K = pr.K, H = pr.H;
  const auto yf = orchid::testing::bf16_to_floats(pr.y), bf = orchid::testing::bf16_to_floats(pr.b2);
  std::vector<double> ref(pr.x.size());
  for (int t = 0; t < T; ++t)
    for (int c = 0; c < H; ++c) {
      double acc = 0;
      for (int j = 0; j < K; ++j) {
        const int row = pr.perm.slot_row[size_t(t) * K + j], e = pr.idx[size_t(t) * K + j];
        acc += double(pr.w[size_t(t) * K + j]) *
               (double(yf[size_t(row) * H + c]) + double(bf[size_t(e) * H + c]));
      }
      ref[size_t(t) * H + c] = double(pr.x[size_t(t) * H + c]) + acc;
    }
  DeviceBuffer<float> dx;
  dx.upload(pr.x);
  pr.combine(dx.get());
  ORCHID_TEST_CUDA(cudaDeviceSynchronize());
  const auto first = dx.download();
  EXPECT_TRUE(orchid::testing::check_close("combine", first, ref, 1e-5, 1e-5, 1e-6));
  // Deterministic: the same inputs give the same bits.
  dx.upload(pr.x);
  pr.combine(dx.get());
  ORCHID_TEST_CUDA(cudaDeviceSynchronize());
  EXPECT_TRUE(orchid::testing::check_exact("combine rerun bitwise", bits_of(dx.download()), bits_of(first)));
}

// The combine with the next layer's input norm against the combine, then rmsnorm_residual of the updated
// residual: the residual's bits equal, the norm output within one bf16 rounding (the sum of squares runs in
// another order), and nearly all of it equal.
TEST_P(ActivationTest, CombineWithNextNormMatchesTheTwoKernels) {
  ORCHID_REQUIRE_GPU_OR_SKIP();
  CombineProblem pr("combine_norm_t", GetParam());
  const int T = pr.T, K = pr.K, H = pr.H;
  std::mt19937_64 rng(orchid::testing::named_seed(case_name("combine_norm_gamma", T).c_str()));
  std::normal_distribution<float> nd(0.0f, 0.2f);
  std::vector<float> gamma(H);
  for (auto& v : gamma) v = 1.0f + nd(rng);
  DeviceBuffer<uint16_t> h_two(size_t(T) * H), h_one(size_t(T) * H);
  DeviceBuffer<float> x_two, x_one, dg;
  dg.upload(gamma);
  x_two.upload(pr.x);
  x_one.upload(pr.x);
  const float eps = 1e-5f;
  pr.combine(x_two.get());
  norm::rmsnorm_residual(x_two.get(), nullptr, dg.get(), reinterpret_cast<__nv_bfloat16*>(h_two.get()), T, H,
                         eps, nullptr);
  moe_combine_norm(pr.dy.get(), pr.db.get(), pr.didx.get(), pr.dw.get(), pr.dsr.get(), T, K, H, x_one.get(),
                   dg.get(), eps, h_one.get(), nullptr);
  ORCHID_TEST_CUDA(cudaDeviceSynchronize());
  EXPECT_TRUE(orchid::testing::check_exact("combine + norm: residual", bits_of(x_one.download()),
                                           bits_of(x_two.download())));
  const auto ha = h_two.download(), hb = h_one.download();
  size_t differ = 0, far = 0;
  for (size_t i = 0; i < ha.size(); ++i) {
    if (ha[i] == hb[i]) continue;
    ++differ;
    const float a = bf16_to_float(ha[i]), b = bf16_to_float(hb[i]);
    if (std::abs(a - b) > std::abs(a) * (1.0f / 128.0f)) ++far;  // more than one bf16 step apart
  }
  std::printf(
      "[check] combine + norm output: %zu of %zu differ from the two kernels', %zu by more than a step\n",
      differ, ha.size(), far);
  EXPECT_EQ(far, 0u);
  EXPECT_LE(double(differ), 1e-3 * double(ha.size()) + 2);
}

INSTANTIATE_TEST_SUITE_P(Tokens, ActivationTest, ::testing::Values(1, 7, 129),
                         [](const ::testing::TestParamInfo<int>& i) { return case_name("t", i.param); });

}  // namespace
}  // namespace orchid::kernels
