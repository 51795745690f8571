// The whole MoE block (moe_forward) for the three expert formats, checked stage by stage against CPU
// references fed with the device's previous stage (so the first wrong stage is named), then end to end
// against an fp64 reference without intermediate rounding. Also: bitwise determinism and CUDA-graph
// capture/replay. Weights are random MXFP4 (the checkpoint format); the BF16 and FP8 formats are made from
// them with the load-time converters (tested in weight_convert_test). And the split router input.
#include "kernels/moe/moe_layer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "bf16_moe_layer.h"
#include "kernel_reference.h"
#include "kernel_test_util.h"
#include "kernels/moe/moe_activation.h"
#include "kernels/moe/mxfp4_tiled_gemm.h"
#include "kernels/moe/mxfp4_word_order.h"
#include "kernels/moe/weight_convert.h"

namespace orchid::kernels {
namespace {

using orchid::testing::DeviceBuffer;
using orchid::testing::rms_of;

template <typename T>
std::vector<T> fetch(const void* p, size_t count) {
  std::vector<T> v(count);
  if (count && cudaMemcpy(v.data(), p, count * sizeof(T), cudaMemcpyDeviceToHost) != cudaSuccess)
    std::abort();
  return v;
}

std::vector<float> fetch_bf16(const void* p, size_t count) {
  return orchid::testing::bf16_to_floats(fetch<uint16_t>(p, count));
}

// Dequantized FP8 rows [rows, kpad] with 1x128 scales -> [rows, k].
std::vector<float> dequant_rows(const std::vector<uint8_t>& q, const std::vector<float>& s, int rows, int k) {
  const int kpad = round_up_128(k);
  std::vector<float> out(size_t(rows) * k);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < k; ++c)
      out[size_t(r) * k + c] =
          fp8e4m3_to_float(q[size_t(r) * kpad + c]) * s[size_t(r) * (kpad / 128) + c / 128];
  return out;
}

struct Case {
  const char* name;
  MoeWeights weights;
  int tokens, experts;
  int hidden = 2880, inter = 2880;  // the golden tiny checkpoint's 128 / 96 too: K not a multiple of a tile
  // MXFP4: up to stream_max tokens the streaming kernel, up to tiled_max the tiled one, above via FP8.
  int stream_max = 64, tiled_max = 0;
};

constexpr int kTiled = 1 << 20;  // tiled_max for cases that take the tiled MXFP4 kernel

class MoeLayerTest : public ::testing::TestWithParam<Case> {};

TEST_P(MoeLayerTest, StagesAndEndToEnd) {
  ORCHID_REQUIRE_GPU_OR_SKIP();
  const Case c = GetParam();
  MoeConfig cfg;
  cfg.experts = c.experts;
  cfg.hidden = c.hidden;
  cfg.inter = c.inter;
  cfg.weights = c.weights;
  cfg.max_tokens = c.tokens;
  cfg.mxfp4_stream_max_tokens = c.stream_max;
  cfg.mxfp4_tiled_max_tokens = c.tiled_max;
  const int T = c.tokens, E = cfg.experts, K = cfg.top_k, H = cfg.hidden, I = cfg.inter, M = T * K;
  const int Hp = round_up_128(H), Ip = round_up_128(I);
  const Mxfp4Path::Kind path = mxfp4_path(cfg, T).kind;
  const bool fp8_path =
      c.weights == MoeWeights::kFp8 || (c.weights == MoeWeights::kMxfp4 && path == Mxfp4Path::kConvertFp8);
  const bool tiled = c.weights == MoeWeights::kMxfp4 && path == Mxfp4Path::kTiled;
  std::mt19937_64 rng(orchid::testing::named_seed(c.name));

  // ---- weights: MXFP4 source, router and biases ----
  std::vector<uint8_t> w1b(size_t(E) * 2 * I * H / 2), w1s(size_t(E) * 2 * I * H / 32);
  std::vector<uint8_t> w2b(size_t(E) * H * I / 2), w2s(size_t(E) * H * I / 32);
  for (auto* v : {&w1b, &w2b})
    for (size_t i = 0; i < v->size(); i += 8) {
      const uint64_t r = rng();
      std::memcpy(v->data() + i, &r, std::min<size_t>(8, v->size() - i));
    }
  std::uniform_int_distribution<int> sc(117, 121);  // weights ~ 2^-10 .. 2^-6 * 6
  for (auto* v : {&w1s, &w2s})
    for (auto& s : *v) s = uint8_t(sc(rng));
  auto wr = orchid::testing::random_bf16(rng, size_t(E) * H, 0.05f);
  auto br16 = orchid::testing::random_bf16(rng, size_t(E), 0.5f);
  std::vector<float> br = orchid::testing::bf16_to_floats(br16);
  auto b1 = orchid::testing::random_bf16(rng, size_t(E) * 2 * I, 0.5f);
  auto b2 = orchid::testing::random_bf16(rng, size_t(E) * H, 0.1f);
  auto h = orchid::testing::random_bf16(rng, size_t(T) * H, 1.0f);
  std::vector<float> x0(size_t(T) * H);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (auto& v : x0) v = nd(rng);

  DeviceBuffer<uint8_t> d_w1b, d_w1s, d_w2b, d_w2s;
  DeviceBuffer<uint16_t> d_wr, d_b1, d_b2, d_h;
  DeviceBuffer<float> d_br, d_x;
  d_w1b.upload(w1b);
  d_w1s.upload(w1s);
  d_w2b.upload(w2b);
  d_w2s.upload(w2s);
  d_wr.upload(wr);
  d_br.upload(br);
  d_b1.upload(b1);
  d_b2.upload(b2);
  d_h.upload(h);
  d_x.upload(x0);

  // Format conversion (load time).
  DeviceBuffer<uint16_t> w1_16, w2_16;
  DeviceBuffer<uint8_t> w1_8, w2_8;
  DeviceBuffer<float> w1_8s, w2_8s;
  MoeLayerWeights lw;
  lw.router_w = d_wr.get();
  lw.router_b = d_br.get();
  lw.b1 = d_b1.get();
  lw.b2 = d_b2.get();
  if (c.weights == MoeWeights::kBf16) {
    w1_16.resize(size_t(E) * 2 * I * H);
    w2_16.resize(size_t(E) * H * I);
    mxfp4_to_bf16(d_w1b.get(), d_w1s.get(), E, 2 * I, H, w1_16.get(), nullptr);
    mxfp4_to_bf16(d_w2b.get(), d_w2s.get(), E, H, I, w2_16.get(), nullptr);
    lw.w1 = w1_16.get();
    lw.w2 = w2_16.get();
  } else if (c.weights == MoeWeights::kFp8) {
    w1_8.resize(size_t(E) * 2 * I * Hp);
    w1_8s.resize(size_t(E) * ((2 * I + 127) / 128) * (Hp / 128));
    w2_8.resize(size_t(E) * H * Ip);
    w2_8s.resize(size_t(E) * ((H + 127) / 128) * (Ip / 128));
    mxfp4_to_fp8_block(d_w1b.get(), d_w1s.get(), E, 2 * I, H, Fp8ScaleRule::kPow2, w1_8.get(), w1_8s.get(),
                       nullptr, nullptr);
    mxfp4_to_fp8_block(d_w2b.get(), d_w2s.get(), E, H, I, Fp8ScaleRule::kPow2, w2_8.get(), w2_8s.get(),
                       nullptr, nullptr);
    lw.w1 = w1_8.get();
    lw.w1_scale = w1_8s.get();
    lw.w2 = w2_8.get();
    lw.w2_scale = w2_8s.get();
  } else {
    lw.w1 = d_w1b.get();
    lw.w1_scale = d_w1s.get();
    lw.w2 = d_w2b.get();
    lw.w2_scale = d_w2s.get();
  }

  DeviceBuffer<uint8_t> gemm_ws(DenseGemm::kRecommendedWorkspace);
  DenseGemm router(gemm_ws.get(), gemm_ws.size());
  DeviceBuffer<uint8_t> ws(moe_workspace_bytes(cfg));
  orchid::testing::poison(ws);
  moe_workspace_init(cfg, ws.get(), nullptr);
  const MoeBuffers b = moe_buffers(cfg, ws.get());
  cudaStream_t stream;
  ORCHID_TEST_CUDA(cudaStreamCreate(&stream));
  moe_forward(cfg, lw, d_h.get(), d_x.get(), T, router, ws.get(), stream);
  ORCHID_TEST_CUDA(cudaStreamSynchronize(stream));
  const auto x1 = d_x.download();

  // ---- stage 1: router logits ----
  const auto hf = orchid::testing::bf16_to_floats(h), wrf = orchid::testing::bf16_to_floats(wr);
  const auto logits = fetch<float>(b.logits, size_t(T) * E);
  {
    std::vector<double> ref(size_t(T) * E);
    orchid::ref::gemm(T, E, H, hf.data(), H, wrf.data(), br.data(), ref.data());
    EXPECT_TRUE(orchid::testing::check_close("1 router logits", logits, ref, 1e-4 * rms_of(ref), 1e-3, 1e-4));
  }
  // ---- stage 2: top-k + softmax (from the device logits) ----
  const auto idx = fetch<int>(b.topk_idx, size_t(M));
  const auto tw = fetch<float>(b.topk_w, size_t(M));
  {
    std::vector<int> ri(M);
    std::vector<float> rw(M);
    orchid::ref::topk_softmax(logits.data(), T, E, K, ri.data(), rw.data());
    EXPECT_TRUE(orchid::testing::check_exact("2 top-k experts", idx, ri));
    EXPECT_TRUE(orchid::testing::check_close("2 top-k weights", tw, std::vector<double>(rw.begin(), rw.end()),
                                             1e-7, 1e-6, 1e-6));
  }
  // ---- stage 3: permutation ----
  const auto perm = orchid::ref::permute(idx.data(), T, E, K);
  EXPECT_TRUE(orchid::testing::check_exact("3 offsets", fetch<int>(b.routing.offsets, E + 1), perm.offsets));
  EXPECT_TRUE(orchid::testing::check_exact("3 slot_row", fetch<int>(b.routing.slot_row, M), perm.slot_row));
  EXPECT_TRUE(
      orchid::testing::check_exact("3 row_token", fetch<int>(b.routing.row_token, M), perm.row_token));

  // Reference expert weights (float) per expert, as the GEMMs see them.
  const int rb1 = (2 * I + 127) / 128, rb2 = (H + 127) / 128;
  std::vector<uint8_t> q1, q2;
  std::vector<float> s1, s2;
  if (fp8_path) {
    const void* p1 = c.weights == MoeWeights::kFp8 ? lw.w1 : b.w1_fp8;
    const void* p2 = c.weights == MoeWeights::kFp8 ? lw.w2 : b.w2_fp8;
    const void* ps1 = c.weights == MoeWeights::kFp8 ? lw.w1_scale : b.w1_fp8_scale;
    const void* ps2 = c.weights == MoeWeights::kFp8 ? lw.w2_scale : b.w2_fp8_scale;
    q1 = fetch<uint8_t>(p1, size_t(E) * 2 * I * Hp);
    q2 = fetch<uint8_t>(p2, size_t(E) * H * Ip);
    s1 = fetch<float>(ps1, size_t(E) * rb1 * (Hp / 128));
    s2 = fetch<float>(ps2, size_t(E) * rb2 * (Ip / 128));
  }
  auto expert_w1 = [&](int e, bool exact) {  // [2I, H]
    std::vector<float> w(size_t(2) * I * H);
    if (fp8_path && !exact)
      orchid::ref::fp8_block_dequant(&q1[size_t(e) * 2 * I * Hp], &s1[size_t(e) * rb1 * (Hp / 128)], 1, 2 * I,
                                     H, w.data());
    else
      orchid::ref::mxfp4_to_float(&w1b[size_t(e) * 2 * I * H / 2], &w1s[size_t(e) * 2 * I * H / 32], 2 * I, H,
                                  w.data());
    return w;
  };
  auto expert_w2 = [&](int e, bool exact) {  // [H, I]
    std::vector<float> w(size_t(H) * I);
    if (fp8_path && !exact)
      orchid::ref::fp8_block_dequant(&q2[size_t(e) * H * Ip], &s2[size_t(e) * rb2 * (Ip / 128)], 1, H, I,
                                     w.data());
    else
      orchid::ref::mxfp4_to_float(&w2b[size_t(e) * H * I / 2], &w2s[size_t(e) * H * I / 32], H, I, w.data());
    return w;
  };

  // ---- stage 4: gate_up (device expert inputs) ----
  std::vector<float> a_in(size_t(M) * H);  // the GEMM's A operand as the device produced it
  if (fp8_path) {
    a_in = dequant_rows(fetch<uint8_t>(b.a_q, size_t(M) * Hp),
                        fetch<float>(b.a_scale, size_t(M) * (Hp / 128)), M, H);
  } else {
    for (int r = 0; r < M; ++r) std::copy_n(&hf[size_t(perm.row_token[r]) * H], H, &a_in[size_t(r) * H]);
  }
  // The MXFP4 kernels apply bias + SwiGLU in the GEMM epilogue: u is never stored, so stage 5 starts from
  // the reference u there.
  const bool fused_swiglu = c.weights == MoeWeights::kMxfp4 && !fp8_path;
  std::vector<float> u(size_t(M) * 2 * I);
  std::vector<float> z_in(size_t(M) * I);
  {
    std::vector<double> ref(size_t(M) * 2 * I);
    for (int e = 0; e < E; ++e) {
      const int m = perm.offsets[e + 1] - perm.offsets[e];
      if (m == 0) continue;
      const auto w = expert_w1(e, false);
      orchid::ref::gemm(m, 2 * I, H, &a_in[size_t(perm.offsets[e]) * H], H, w.data(), nullptr,
                        &ref[size_t(perm.offsets[e]) * 2 * I]);
    }
    if (fused_swiglu) {
      for (size_t i = 0; i < u.size(); ++i) u[i] = float(ref[i]);
    } else {
      u = fetch_bf16(b.u, size_t(M) * 2 * I);
      EXPECT_TRUE(orchid::testing::check_close("4 gate_up u", u, ref, 2e-3 * rms_of(ref), 8e-3, 5e-3));
    }
  }
  // ---- stage 5: bias + SwiGLU (from the device u) ----
  {
    const auto b1f = orchid::testing::bf16_to_floats(b1);
    std::vector<double> ref(size_t(M) * I);
    for (int r = 0; r < M; ++r) {
      const int e = perm.row_expert[r];
      for (int i = 0; i < I; ++i)
        ref[size_t(r) * I + i] =
            orchid::ref::swiglu(u[size_t(r) * 2 * I + 2 * i] + b1f[size_t(e) * 2 * I + 2 * i],
                                u[size_t(r) * 2 * I + 2 * i + 1] + b1f[size_t(e) * 2 * I + 2 * i + 1],
                                cfg.swiglu_limit, cfg.swiglu_alpha);
    }
    if (fp8_path) {
      z_in = dequant_rows(fetch<uint8_t>(b.z_q, size_t(M) * Ip),
                          fetch<float>(b.z_scale, size_t(M) * (Ip / 128)), M, I);
      // FP8: within one e4m3 step (2^-3 relative at worst) of the exact value.
      EXPECT_TRUE(
          orchid::testing::check_close("5 swiglu z (fp8)", z_in, ref, 1e-3 * rms_of(ref), 0.07, 0.05));
    } else {
      // The tiled MXFP4 kernel writes z in the order its down GEMM reads.
      z_in = tiled ? orchid::testing::bf16_to_floats(orchid::testing::from_block_order(
                         fetch<uint16_t>(b.z_bf16, size_t(M) * I), size_t(I), mxfp4_tiled_pos))
                   : fetch_bf16(b.z_bf16, size_t(M) * I);
      // Fused: z comes from the kernel's fp32 sums, the reference from fp64 ones (a bit more slack).
      EXPECT_TRUE(orchid::testing::check_close(
          fused_swiglu ? "4+5 gate_up + swiglu z (fused)" : "5 swiglu z (bf16)", z_in, ref,
          fused_swiglu ? 2e-3 * rms_of(ref) : 1e-6, 1.0 / 128, fused_swiglu ? 5e-3 : 4e-3));
    }
  }
  // ---- stage 6: down (device z) ----
  const auto y = fetch_bf16(b.y, size_t(M) * H);
  {
    std::vector<double> ref(size_t(M) * H);
    for (int e = 0; e < E; ++e) {
      const int m = perm.offsets[e + 1] - perm.offsets[e];
      if (m == 0) continue;
      const auto w = expert_w2(e, false);
      orchid::ref::gemm(m, H, I, &z_in[size_t(perm.offsets[e]) * I], I, w.data(), nullptr,
                        &ref[size_t(perm.offsets[e]) * H]);
    }
    EXPECT_TRUE(orchid::testing::check_close("6 down y", y, ref, 2e-3 * rms_of(ref), 8e-3, 5e-3));
  }
  // ---- stage 7: combine (device y) ----
  const auto b2f = orchid::testing::bf16_to_floats(b2);
  {
    std::vector<double> ref(size_t(T) * H);
    for (int t = 0; t < T; ++t)
      for (int col = 0; col < H; ++col) {
        double acc = 0;
        for (int j = 0; j < K; ++j) {
          const int row = perm.slot_row[size_t(t) * K + j], e = idx[size_t(t) * K + j];
          acc += double(tw[size_t(t) * K + j]) *
                 (double(y[size_t(row) * H + col]) + double(b2f[size_t(e) * H + col]));
        }
        ref[size_t(t) * H + col] = double(x0[size_t(t) * H + col]) + acc;
      }
    EXPECT_TRUE(orchid::testing::check_close("7 combine x", x1, ref, 1e-5, 1e-5, 1e-6));
  }
  // ---- end to end: fp64 from h with the exact MXFP4 weights, no intermediate rounding ----
  // (kept for the W4A8 GEMM's run below, which is held to the same bound as the FP8 path).
  std::vector<double> delta(size_t(T) * H, 0.0);
  const double e2e_atol = 0.25, e2e_rtol = 0.5, e2e_l2 = fp8_path ? 8e-2 : 1.5e-2;
  {
    const auto b1f = orchid::testing::bf16_to_floats(b1);
    std::vector<double> got(size_t(T) * H);
    std::vector<double> uu(static_cast<size_t>(2 * I)), yy(static_cast<size_t>(H));
    std::vector<float> zz(I);
    for (int e = 0; e < E; ++e) {
      if (perm.offsets[e + 1] == perm.offsets[e]) continue;
      const auto w1 = expert_w1(e, true), w2 = expert_w2(e, true);
      for (int r = perm.offsets[e]; r < perm.offsets[e + 1]; ++r) {
        const int t = perm.row_token[r];
        int j = 0;
        while (perm.slot_row[size_t(t) * K + j] != r) ++j;
        orchid::ref::gemm(1, 2 * I, H, &hf[size_t(t) * H], H, w1.data(), nullptr, uu.data());
        for (int i = 0; i < I; ++i)
          zz[i] = orchid::ref::swiglu(float(uu[2 * i] + b1f[size_t(e) * 2 * I + 2 * i]),
                                      float(uu[2 * i + 1] + b1f[size_t(e) * 2 * I + 2 * i + 1]),
                                      cfg.swiglu_limit, cfg.swiglu_alpha);
        orchid::ref::gemm(1, H, I, zz.data(), I, w2.data(), nullptr, yy.data());
        for (int col = 0; col < H; ++col)
          delta[size_t(t) * H + col] += double(tw[size_t(t) * K + j]) * (yy[col] + b2f[size_t(e) * H + col]);
      }
    }
    std::vector<float> got_delta(size_t(T) * H);
    for (size_t i = 0; i < got_delta.size(); ++i) got_delta[i] = float(double(x1[i]) - double(x0[i]));
    // BF16/MXFP4: bf16 roundings of u, z and y; FP8: 1x128 activation quantization of h and z on top.
    EXPECT_TRUE(orchid::testing::check_close("end-to-end moe delta", got_delta, delta,
                                             e2e_atol * rms_of(delta), e2e_rtol, e2e_l2));
  }
  // ---- determinism and CUDA-graph capture ----
  {
    d_x.upload(x0);
    moe_forward(cfg, lw, d_h.get(), d_x.get(), T, router, ws.get(), stream);
    ORCHID_TEST_CUDA(cudaStreamSynchronize(stream));
    auto bits = [](const std::vector<float>& v) {
      std::vector<uint32_t> b(v.size());
      std::memcpy(b.data(), v.data(), v.size() * 4);
      return b;
    };
    EXPECT_TRUE(orchid::testing::check_exact("rerun bitwise", bits(d_x.download()), bits(x1)));

    d_x.upload(x0);
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    ORCHID_TEST_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    moe_forward(cfg, lw, d_h.get(), d_x.get(), T, router, ws.get(), stream);
    ORCHID_TEST_CUDA(cudaStreamEndCapture(stream, &graph));
    ORCHID_TEST_CUDA(cudaGraphInstantiate(&exec, graph, 0));
    ORCHID_TEST_CUDA(cudaGraphLaunch(exec, stream));
    ORCHID_TEST_CUDA(cudaStreamSynchronize(stream));
    EXPECT_TRUE(orchid::testing::check_exact("cuda graph replay bitwise", bits(d_x.download()), bits(x1)));
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);

    if (c.weights == MoeWeights::kMxfp4) {
      // The expert blocks repacked (mxfp4_word_order.h, as loaded by default): the tiled
      // GEMM and the FP8 conversion decode them to the same registers, so the same bits; the streaming
      // GEMM computes on bf16 MMAs with the MX scale in the weights instead of f16 MMAs with the scale on
      // each block's partial sums, so the same result up to fp32 accumulation order.
      DeviceBuffer<uint8_t> d_w1g(size_t(orchid::kernels::mxfp4_order::grouped_bytes(int64_t(E) * 2 * I, H))),
          d_w2g(size_t(orchid::kernels::mxfp4_order::grouped_bytes(int64_t(E) * H, I)));
      mxfp4_to_tiled_order(d_w1b.get(), d_w1g.get(), int64_t(E) * 2 * I, H, stream);
      mxfp4_to_tiled_order(d_w2b.get(), d_w2g.get(), int64_t(E) * H, I, stream);
      MoeConfig reordered = cfg;
      reordered.mxfp4_tiled_order = true;
      reordered.mxfp4_w4a8 = false;  // the conversion, as cfg (checkpoint order) runs it; W4A8 below
      MoeLayerWeights repacked = lw;
      repacked.w1 = d_w1g.get();
      repacked.w2 = d_w2g.get();
      DeviceBuffer<uint32_t> d_scale_max(2);  // as loaded: each tensor's largest scale
      mxfp4_scale_max(static_cast<const uint8_t*>(lw.w1_scale), int64_t(E) * 2 * I * H / 32,
                      d_scale_max.get(), stream);
      mxfp4_scale_max(static_cast<const uint8_t*>(lw.w2_scale), int64_t(E) * H * I / 32,
                      d_scale_max.get() + 1, stream);
      repacked.w1_scale_max = d_scale_max.get();
      repacked.w2_scale_max = d_scale_max.get() + 1;
      d_x.upload(x0);
      moe_forward(reordered, repacked, d_h.get(), d_x.get(), T, router, ws.get(), stream);
      ORCHID_TEST_CUDA(cudaStreamSynchronize(stream));
      // Streaming: the two MoE deltas, each ~2.4e-3 (rel. L2) from fp64.
      if (mxfp4_path(cfg, T).kind == Mxfp4Path::kStream) {
        const auto x2 = d_x.download();
        std::vector<float> got(x2.size());
        std::vector<double> want(x2.size());
        double rms = 0;
        for (size_t i = 0; i < x2.size(); ++i) {
          got[i] = x2[i] - x0[i];
          want[i] = double(x1[i]) - double(x0[i]);
          rms += want[i] * want[i];
        }
        rms = std::sqrt(rms / double(std::max<size_t>(1, want.size())));
        EXPECT_TRUE(orchid::testing::check_close("repacked blocks (streaming, bf16 MMAs) moe delta", got,
                                                 want, 0.05 * rms, 0.1, 6e-3));
      } else {
        EXPECT_TRUE(orchid::testing::check_exact("repacked blocks bitwise", bits(d_x.download()), bits(x1)));
      }
      if (fp8_path) {
        // The W4A8 GEMM in the conversion's place (its workspace is the smaller: no FP8 expert copies):
        // e4m3 activations a row (gate_up) and one fixed scale (down) instead of 1x128 groups, and the
        // whole k accumulated on the FP8 tensor cores. Against the same fp64 reference and bound as the FP8
        // path end to end (compared with the conversion path's delta instead, the two paths' errors add:
        // rel. L2 5.6e-2 between them at 67 tokens, H100, 2026-12-07).
        MoeConfig w4a8 = reordered;
        w4a8.mxfp4_w4a8 = true;
        ASSERT_EQ(mxfp4_path(w4a8, T).kind, Mxfp4Path::kW4a8);
        ASSERT_LE(moe_workspace_bytes(w4a8), moe_workspace_bytes(cfg));
        d_x.upload(x0);
        moe_forward(w4a8, repacked, d_h.get(), d_x.get(), T, router, ws.get(), stream);
        ORCHID_TEST_CUDA(cudaStreamSynchronize(stream));
        const auto x3 = d_x.download();
        std::vector<float> got(x3.size());
        for (size_t i = 0; i < x3.size(); ++i) got[i] = float(double(x3[i]) - double(x0[i]));
        EXPECT_TRUE(orchid::testing::check_close("end-to-end moe delta (W4A8 GEMM)", got, delta,
                                                 e2e_atol * rms_of(delta), e2e_rtol, e2e_l2));
        // With no tiled range (ORCHID_MXFP4_TILED_MAX_TOKENS=0) the workspace still holds the W4A8 GEMM's
        // tile list, and the step is the same bits.
        MoeConfig w4a8_only = w4a8;
        w4a8_only.mxfp4_tiled_max_tokens = 0;
        ASSERT_EQ(mxfp4_path(w4a8_only, T).kind, Mxfp4Path::kW4a8);
        DeviceBuffer<uint8_t> ws_only(moe_workspace_bytes(w4a8_only));
        moe_workspace_init(w4a8_only, ws_only.get(), nullptr);
        d_x.upload(x0);
        moe_forward(w4a8_only, repacked, d_h.get(), d_x.get(), T, router, ws_only.get(), stream);
        ORCHID_TEST_CUDA(cudaStreamSynchronize(stream));
        EXPECT_TRUE(
            orchid::testing::check_exact("W4A8 with no tiled range bitwise", bits(d_x.download()), bits(x3)));
      }
    }
  }
  cudaStreamDestroy(stream);
}

INSTANTIATE_TEST_SUITE_P(
    Formats, MoeLayerTest,
    ::testing::Values(Case{"bf16_t1", MoeWeights::kBf16, 1, 32}, Case{"bf16_t67", MoeWeights::kBf16, 67, 32},
                      Case{"fp8_t1", MoeWeights::kFp8, 1, 32}, Case{"fp8_t67", MoeWeights::kFp8, 67, 32},
                      Case{"mxfp4_t1", MoeWeights::kMxfp4, 1, 32},
                      Case{"mxfp4_t5", MoeWeights::kMxfp4, 5, 32},
                      Case{"mxfp4_t67_via_fp8", MoeWeights::kMxfp4, 67, 32},
                      Case{"mxfp4_e128_t3", MoeWeights::kMxfp4, 3, 128},
                      Case{"bf16_h128_i96_t55", MoeWeights::kBf16, 55, 8, 128, 96},
                      Case{"fp8_h128_i96_t55", MoeWeights::kFp8, 55, 8, 128, 96},
                      Case{"mxfp4_h128_i96_t55", MoeWeights::kMxfp4, 55, 8, 128, 96},
                      Case{"mxfp4_h128_i96_t70", MoeWeights::kMxfp4, 70, 8, 128, 96},
                      Case{"mxfp4_t67_tiled", MoeWeights::kMxfp4, 67, 32, 2880, 2880, 0, kTiled},
                      Case{"mxfp4_t300_tiled", MoeWeights::kMxfp4, 300, 32, 2880, 2880, 0, kTiled},
                      Case{"mxfp4_t700_tiled", MoeWeights::kMxfp4, 700, 32, 2880, 2880, 0, kTiled},
                      Case{"mxfp4_e128_t90_tiled", MoeWeights::kMxfp4, 90, 128, 2880, 2880, 0, kTiled},
                      Case{"mxfp4_h128_i96_t70_tiled", MoeWeights::kMxfp4, 70, 8, 128, 96, 0, kTiled},
                      // ~150 rows an expert: the 128-token tiles (one CTA an SM), gate_up then down
                      Case{"mxfp4_h128_i96_t300_tiled128", MoeWeights::kMxfp4, 300, 8, 128, 96, 0, kTiled}),
    [](const ::testing::TestParamInfo<Case>& i) { return std::string(i.param.name); });

// The split router input (moe_forward with split_input): h is an fp32 activation given as 2T BF16 rows,
// hi then lo. The router GEMM covers both halves without bias, routing uses (hi + lo) + bias and thus agrees
// with the fp32 input's routing, and the experts read the hi rows: on tokens routed alike, the output is the
// unsplit call's on hi but for the routing weights (which see the lo part). BF16 experts, the fused
// (T*k <= kFusedRouteMaxItems) and the general routing path.
TEST(MoeLayerSplitRouter, RoutesTheFp32Input) {
  ORCHID_REQUIRE_GPU_OR_SKIP();
  for (int T : {5, 20, 37, 300}) {
    std::mt19937_64 rng(orchid::testing::named_seed("split_router") + uint64_t(T));
    const Bf16MoeLayer layer(T, rng);
    const MoeConfig& cfg = layer.cfg;
    const int E = cfg.experts, K = cfg.top_k, H = cfg.hidden;
    const std::vector<uint16_t>& wr = layer.router_w;
    const std::vector<float>& br = layer.router_b;
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> h32(size_t(T) * H), x0(size_t(T) * H);
    for (auto& v : h32) v = nd(rng);
    for (auto& v : x0) v = nd(rng);
    std::vector<uint16_t> h2(size_t(2) * T * H);  // hi rows, then lo rows
    for (size_t i = 0; i < h32.size(); ++i) {
      h2[i] = float_to_bf16(h32[i]);
      h2[h32.size() + i] = float_to_bf16(h32[i] - bf16_to_float(h2[i]));
    }
    DeviceBuffer<uint16_t> d_h2;
    DeviceBuffer<float> d_x_split, d_x_plain;
    d_h2.upload(h2);
    d_x_split.upload(x0);
    d_x_plain.upload(x0);
    const MoeLayerWeights lw = layer.weights();
    DenseGemm& router = *layer.router;
    void* ws = layer.ws.get();
    const MoeBuffers b = layer.buffers();
    moe_forward(cfg, lw, d_h2.get(), d_x_split.get(), T, router, ws, nullptr, true);
    ORCHID_TEST_CUDA(cudaDeviceSynchronize());
    const auto logits = fetch<float>(b.logits, size_t(2) * T * E);
    const auto idx = fetch<int>(b.topk_idx, size_t(T) * K);
    const auto x_split = d_x_split.download();
    moe_forward(cfg, lw, d_h2.get(), d_x_plain.get(), T, router, ws, nullptr);  // hi rows only
    ORCHID_TEST_CUDA(cudaDeviceSynchronize());
    const auto idx_plain = fetch<int>(b.topk_idx, size_t(T) * K);
    const auto x_plain = d_x_plain.download();

    // The GEMM's two halves against the reference, then routing on their sum as specified.
    const auto wrf = orchid::testing::bf16_to_floats(wr);
    const auto h2f = orchid::testing::bf16_to_floats(h2);
    std::vector<double> ref2(size_t(2) * T * E);
    orchid::ref::gemm(2 * T, E, H, h2f.data(), H, wrf.data(), nullptr, ref2.data());
    EXPECT_TRUE(orchid::testing::check_close("split router logits (hi and lo rows)", logits, ref2,
                                             1e-4 * rms_of(ref2), 1e-3, 1e-4));
    std::vector<float> sum(size_t(T) * E);
    for (size_t i = 0; i < sum.size(); ++i) sum[i] = (logits[i] + logits[sum.size() + i]) + br[i % size_t(E)];
    std::vector<int> ri(size_t(T) * K);
    std::vector<float> rw(ri.size());
    orchid::ref::topk_softmax(sum.data(), T, E, K, ri.data(), rw.data());
    EXPECT_TRUE(orchid::testing::check_exact("split router top-k", idx, ri));
    // Against the fp32 input's routing (fp64 logits): the split sees the same experts wherever the k-th and
    // (k+1)-th logits are more than 1e-4 apart; hi alone is reported (it flips near-ties).
    std::vector<double> ref32(size_t(T) * E);
    orchid::ref::gemm(T, E, H, h32.data(), H, wrf.data(), br.data(), ref32.data());
    int decided = 0, split_miss = 0, plain_miss = 0, same_tokens = 0;
    double err2 = 0, ref2n = 0;
    for (int t = 0; t < T; ++t) {
      std::vector<std::pair<double, int>> v;
      for (int e = 0; e < E; ++e) v.push_back({-ref32[size_t(t) * E + e], e});
      std::sort(v.begin(), v.end());
      std::vector<int> want;
      for (int j = 0; j < K; ++j) want.push_back(v[size_t(j)].second);
      std::sort(want.begin(), want.end());
      auto set_of = [&](const std::vector<int>& a) {
        std::vector<int> s(a.begin() + size_t(t) * K, a.begin() + size_t(t + 1) * K);
        std::sort(s.begin(), s.end());
        return s;
      };
      const bool dec = v[size_t(K)].first - v[size_t(K - 1)].first > 1e-4;
      decided += dec;
      split_miss += dec && set_of(idx) != want;
      plain_miss += set_of(idx_plain) != want;
      if (set_of(idx) == set_of(idx_plain)) {
        ++same_tokens;
        for (int c = 0; c < H; ++c) {
          const double d = double(x_split[size_t(t) * H + c]) - double(x_plain[size_t(t) * H + c]);
          err2 += d * d;
          ref2n += double(x_plain[size_t(t) * H + c]) * double(x_plain[size_t(t) * H + c]);
        }
      }
    }
    const double x_rel = same_tokens ? std::sqrt(err2 / ref2n) : 0.0;
    std::printf(
        "    T=%d: %d of %d tokens decided; experts unlike fp32's: split %d, hi only %d (all tokens); "
        "output vs the unsplit call on %d alike-routed tokens: rel L2 %.2e\n",
        T, decided, T, split_miss, plain_miss, same_tokens, x_rel);
    EXPECT_EQ(split_miss, 0);
    EXPECT_GT(same_tokens, 0);
    EXPECT_LT(x_rel, 1e-2);  // the routing weights differ by the lo part (~2^-9 of a logit), nothing else
  }
}

}  // namespace
}  // namespace orchid::kernels

namespace orchid::kernels {
namespace {

// Expert parallelism: each rank of EP2/EP4/EP8 runs moe_forward on its experts' slices of the weights with
// MoeConfig::local and stores its part; the parts summed over the ranks give the whole block (every expert on
// one rank), on each path of each format. The ranks compute the same rows of the same experts, so the only
// difference is the fp32 summation order of the k terms (parts first): bounds of fp32 rounding.
struct EpCase {
  const char* name;
  MoeWeights weights;
  int tokens;
  int stream_max = 64, tiled_max = 0;
};

class MoeLayerExpertParallelTest : public ::testing::TestWithParam<EpCase> {};

TEST_P(MoeLayerExpertParallelTest, PartsSumToTheWholeBlock) {
  ORCHID_REQUIRE_GPU_OR_SKIP();
  const EpCase c = GetParam();
  MoeConfig cfg;
  cfg.experts = 32;
  cfg.hidden = 128;
  cfg.inter = 96;
  cfg.weights = c.weights;
  cfg.max_tokens = c.tokens;
  cfg.mxfp4_stream_max_tokens = c.stream_max;
  cfg.mxfp4_tiled_max_tokens = c.tiled_max;
  const int T = c.tokens, E = cfg.experts, H = cfg.hidden, I = cfg.inter;
  const int Hp = round_up_128(H), Ip = round_up_128(I);
  std::mt19937_64 rng(orchid::testing::named_seed(c.name));
  std::vector<uint8_t> w1b(size_t(E) * 2 * I * H / 2), w1s(size_t(E) * 2 * I * H / 32);
  std::vector<uint8_t> w2b(size_t(E) * H * I / 2), w2s(size_t(E) * H * I / 32);
  for (auto* v : {&w1b, &w2b})
    for (auto& b : *v) b = uint8_t(rng());
  std::uniform_int_distribution<int> sc(117, 121);
  for (auto* v : {&w1s, &w2s})
    for (auto& s : *v) s = uint8_t(sc(rng));
  DeviceBuffer<uint8_t> d_w1b, d_w1s, d_w2b, d_w2s;
  DeviceBuffer<uint16_t> d_wr, d_b1, d_b2, d_h;
  DeviceBuffer<float> d_br;
  d_w1b.upload(w1b);
  d_w1s.upload(w1s);
  d_w2b.upload(w2b);
  d_w2s.upload(w2s);
  d_wr.upload(orchid::testing::random_bf16(rng, size_t(E) * H, 0.05f));
  d_br.upload(orchid::testing::bf16_to_floats(orchid::testing::random_bf16(rng, size_t(E), 0.5f)));
  d_b1.upload(orchid::testing::random_bf16(rng, size_t(E) * 2 * I, 0.5f));
  d_b2.upload(orchid::testing::random_bf16(rng, size_t(E) * H, 0.1f));
  d_h.upload(orchid::testing::random_bf16(rng, size_t(T) * H, 1.0f));

  // Bytes per expert of each expert tensor in the format, and the whole tensors.
  size_t e_w1 = size_t(2) * I * H / 2, e_w1s = size_t(2) * I * H / 32, e_w2 = size_t(H) * I / 2,
         e_w2s = size_t(H) * I / 32;
  DeviceBuffer<uint16_t> w1_16, w2_16;
  DeviceBuffer<uint8_t> w1_8, w2_8;
  DeviceBuffer<float> w1_8s, w2_8s;
  const uint8_t *w1 = d_w1b.get(), *w1s_p = d_w1s.get(), *w2 = d_w2b.get(), *w2s_p = d_w2s.get();
  if (c.weights == MoeWeights::kBf16) {
    w1_16.resize(size_t(E) * 2 * I * H);
    w2_16.resize(size_t(E) * H * I);
    mxfp4_to_bf16(d_w1b.get(), d_w1s.get(), E, 2 * I, H, w1_16.get(), nullptr);
    mxfp4_to_bf16(d_w2b.get(), d_w2s.get(), E, H, I, w2_16.get(), nullptr);
    w1 = reinterpret_cast<const uint8_t*>(w1_16.get());
    w2 = reinterpret_cast<const uint8_t*>(w2_16.get());
    w1s_p = w2s_p = nullptr;
    e_w1 = size_t(2) * I * H * 2;
    e_w2 = size_t(H) * I * 2;
    e_w1s = e_w2s = 0;
  } else if (c.weights == MoeWeights::kFp8) {
    const size_t s1 = size_t((2 * I + 127) / 128) * (Hp / 128), s2 = size_t((H + 127) / 128) * (Ip / 128);
    w1_8.resize(size_t(E) * 2 * I * Hp);
    w1_8s.resize(size_t(E) * s1);
    w2_8.resize(size_t(E) * H * Ip);
    w2_8s.resize(size_t(E) * s2);
    mxfp4_to_fp8_block(d_w1b.get(), d_w1s.get(), E, 2 * I, H, Fp8ScaleRule::kPow2, w1_8.get(), w1_8s.get(),
                       nullptr, nullptr);
    mxfp4_to_fp8_block(d_w2b.get(), d_w2s.get(), E, H, I, Fp8ScaleRule::kPow2, w2_8.get(), w2_8s.get(),
                       nullptr, nullptr);
    w1 = w1_8.get();
    w2 = w2_8.get();
    w1s_p = reinterpret_cast<const uint8_t*>(w1_8s.get());
    w2s_p = reinterpret_cast<const uint8_t*>(w2_8s.get());
    e_w1 = size_t(2) * I * Hp;
    e_w2 = size_t(H) * Ip;
    e_w1s = s1 * 4;
    e_w2s = s2 * 4;
  }
  // The layer weights of the experts [begin, begin + count): views into the whole tensors.
  auto shard = [&](int begin) {
    MoeLayerWeights w;
    w.router_w = d_wr.get();
    w.router_b = d_br.get();
    w.w1 = w1 + size_t(begin) * e_w1;
    w.w2 = w2 + size_t(begin) * e_w2;
    w.w1_scale = w1s_p ? w1s_p + size_t(begin) * e_w1s : nullptr;
    w.w2_scale = w2s_p ? w2s_p + size_t(begin) * e_w2s : nullptr;
    w.b1 = d_b1.get() + size_t(begin) * 2 * I;
    w.b2 = d_b2.get() + size_t(begin) * H;
    return w;
  };
  DeviceBuffer<uint8_t> gemm_ws(DenseGemm::kRecommendedWorkspace);
  DenseGemm router(gemm_ws.get(), gemm_ws.size());
  DeviceBuffer<float> d_x(size_t(T) * H);
  DeviceBuffer<uint8_t> ws(moe_workspace_bytes(cfg));
  moe_workspace_init(cfg, ws.get(), nullptr);
  orchid::testing::poison(d_x);
  moe_forward(cfg, shard(0), d_h.get(), d_x.get(), T, router, ws.get(), nullptr, false,
              MoeOutput::kStorePart);
  ORCHID_TEST_CUDA(cudaDeviceSynchronize());
  const auto whole = d_x.download();
  const std::vector<double> want(whole.begin(), whole.end());
  double rms = 0;
  for (double v : want) rms += v * v;
  rms = std::sqrt(rms / double(want.size()));
  ASSERT_GT(rms, 0.0);
  for (int ep : {2, 4, 8}) {
    MoeConfig rc = cfg;
    std::vector<float> sum(size_t(T) * H, 0.0f);
    for (int begin = 0; begin < E; begin += E / ep) {
      rc.local = MoeExpertRange{begin, E / ep};
      DeviceBuffer<uint8_t> rws(moe_workspace_bytes(rc));
      orchid::testing::poison(rws);
      moe_workspace_init(rc, rws.get(), nullptr);
      orchid::testing::poison(d_x);
      moe_forward(rc, shard(begin), d_h.get(), d_x.get(), T, router, rws.get(), nullptr, false,
                  MoeOutput::kStorePart);
      ORCHID_TEST_CUDA(cudaDeviceSynchronize());
      const auto part = d_x.download();
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += part[i];
    }
    const auto cmp = orchid::testing::compare(sum, want, 1e-5 * rms, 1e-5);
    EXPECT_TRUE(cmp.ok(1e-6)) << c.name << " EP" << ep << ": " << cmp.summary();
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, MoeLayerExpertParallelTest,
                         ::testing::Values(EpCase{"ep_bf16_t37", MoeWeights::kBf16, 37},
                                           EpCase{"ep_fp8_t37", MoeWeights::kFp8, 37},
                                           EpCase{"ep_mxfp4_stream_t3", MoeWeights::kMxfp4, 3},
                                           EpCase{"ep_mxfp4_tiled_t70", MoeWeights::kMxfp4, 70, 0, kTiled},
                                           EpCase{"ep_mxfp4_via_fp8_t70", MoeWeights::kMxfp4, 70, 0, 0},
                                           EpCase{"ep_mxfp4_tiled_t300", MoeWeights::kMxfp4, 300, 0, kTiled}),
                         [](const ::testing::TestParamInfo<EpCase>& i) { return std::string(i.param.name); });

}  // namespace
}  // namespace orchid::kernels
