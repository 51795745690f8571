// Micro-benchmarks of the attention-block kernels on gpt-oss shapes: fused residual RMSNorm, QKV bias + RoPE
// + KV write, sink attention prefill (full causal and 128-key sliding window) and split-KV decode.
// Each row: median of CUDA-event-timed repeats after warm-up, inputs rotated over enough copies to exceed
// L2 three times, random (never zero) data; achieved TFLOP/s (prefill: useful causal FLOPs) or GB/s (each
// input read once, each output written once) against the measured H200 ceilings (742 TFLOP/s dense BF16,
// 4.17 TB/s HBM). Ends with the projections that the model-level targets need.
//   attention_bench [--quick] [--prefill | --decode]   (--quick: fewer and smaller shapes; --prefill: prefill
//   rows only; --decode: the split-KV decode rows only, BF16 and FP8 KV)
//   attention_bench --prefill-at NUM_Q START [WINDOW]   (the three prefill kernels at one shape: NUM_Q tokens
//   of one sequence from position START, 16-token pages; e.g. the chunk line's rounds of work items)
//   attention_bench --decode-at BATCH CTX [bf16|fp8]   (one decode shape, full attention, 16-token pages: a
//   profiler's single kernel)
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/attention/attention_plan.h"
#include "kernels/attention/kv_layout.h"
#include "kernels/attention/precise_attention.h"
#include "kernels/attention/rope_kv_write.h"
#include "kernels/attention/sink_attention.h"
#include "kernels/common/cuda_check.h"
#include "kernels/common/device_info.h"
#include "kernels/norm/rmsnorm.h"

namespace orchid::kernels::attention {
namespace {

constexpr double kPeakTflops = 742.0;     // measured dense BF16 GEMM, H200 (specs/hopper.md)
constexpr double kPeakTBs = 4.17;         // measured HBM copy, H200
constexpr double kPeakFp32Tflops = 67.0;  // FP32 FMA on CUDA cores, H200 SXM datasheet
constexpr int kHq = 64, kHkv = 8, kHidden = 2880;

constexpr int kE4m3One = 0x38;  // e4m3 1.0 (0.0111.000): FP8 pools for timing

struct Row {
  std::string kernel, shape;
  double us = 0, tflops = 0, gbs = 0;
  double peak_tflops = kPeakTflops;  // the ceiling of the units the kernel uses
};
std::vector<Row> g_rows;

void print_row(const Row& r) {
  char achieved[64], frac[64];
  if (r.tflops > 0) {
    std::snprintf(achieved, sizeof achieved, "%8.1f TFLOP/s", r.tflops);
    std::snprintf(frac, sizeof frac, "%5.1f%% of %.0f TFLOP/s", 100 * r.tflops / r.peak_tflops,
                  r.peak_tflops);
  } else {
    std::snprintf(achieved, sizeof achieved, "%8.0f GB/s", r.gbs);
    std::snprintf(frac, sizeof frac, "%5.1f%% of %.2f TB/s", 100 * r.gbs / (kPeakTBs * 1000), kPeakTBs);
  }
  std::printf("%-18s %-44s %11.1f  %s  %s\n", r.kernel.c_str(), r.shape.c_str(), r.us, achieved, frac);
  std::fflush(stdout);
}

void add_row(Row r) {
  print_row(r);
  g_rows.push_back(std::move(r));
}

// splitmix64 hash -> uniform(-a, a) bf16, so data is random, device-made and never zero-filled.
__global__ void fill_bf16(__nv_bfloat16* p, size_t n, uint64_t seed, float a) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint64_t z = seed + i * 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    const float u = float(z >> 40) * (1.0f / 16777216.0f);
    p[i] = __float2bfloat16(a * (2.0f * u - 1.0f));
  }
}
__global__ void fill_f32(float* p, size_t n, uint64_t seed, float a, float offset) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint64_t z = seed + i * 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    p[i] = offset + a * (2.0f * float(z >> 40) * (1.0f / 16777216.0f) - 1.0f);
  }
}

template <typename T>
struct Dev {
  T* p = nullptr;
  size_t n = 0;
  explicit Dev(size_t count) : n(count) {
    ORCHID_CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)));
  }
  ~Dev() { cudaFree(p); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
};

uint64_t g_seed = 12345;
void random_bf16(__nv_bfloat16* p, size_t n, float a) {
  fill_bf16<<<1024, 256>>>(p, n, g_seed++ * 0x1234567ull, a);
  ORCHID_CUDA_CHECK_LAUNCH();
}
void random_f32(float* p, size_t n, float a, float offset) {
  fill_f32<<<1024, 256>>>(p, n, g_seed++ * 0x7654321ull, a, offset);
  ORCHID_CUDA_CHECK_LAUNCH();
}

// Input copies needed so that one pass over all of them exceeds L2 three times.
int rotation_sets(size_t bytes_per_set, int max_sets = 16) {
  const double l2 = double(device_info().l2_bytes);
  const int sets = int(std::ceil(3.0 * l2 / double(std::max<size_t>(bytes_per_set, 1))));
  return std::clamp(sets, 1, max_sets);
}

// Median time in microseconds of launch(set) over repeats, after warm-up; sets rotate.
double median_us(const std::function<void(int)>& launch, int sets) {
  for (int i = 0; i < 3; ++i) launch(i % sets);
  cudaEvent_t a, b;
  ORCHID_CUDA_CHECK(cudaEventCreate(&a));
  ORCHID_CUDA_CHECK(cudaEventCreate(&b));
  // Size the repeat count from one timed run: about 0.3 s in total, 10..200 repeats.
  ORCHID_CUDA_CHECK(cudaEventRecord(a));
  launch(0);
  ORCHID_CUDA_CHECK(cudaEventRecord(b));
  ORCHID_CUDA_CHECK(cudaEventSynchronize(b));
  float first_ms = 0;
  ORCHID_CUDA_CHECK(cudaEventElapsedTime(&first_ms, a, b));
  const int repeats = std::clamp(int(300.0 / std::max(first_ms, 1e-3f)), 10, 200);
  std::vector<float> ms(static_cast<size_t>(repeats));
  for (int r = 0; r < repeats; ++r) {
    ORCHID_CUDA_CHECK(cudaEventRecord(a));
    launch(r % sets);
    ORCHID_CUDA_CHECK(cudaEventRecord(b));
    ORCHID_CUDA_CHECK(cudaEventSynchronize(b));
    ORCHID_CUDA_CHECK(cudaEventElapsedTime(&ms[size_t(r)], a, b));
  }
  ORCHID_CUDA_CHECK(cudaGetLastError());
  ORCHID_CUDA_CHECK(cudaEventDestroy(a));
  ORCHID_CUDA_CHECK(cudaEventDestroy(b));
  std::nth_element(ms.begin(), ms.begin() + repeats / 2, ms.end());
  return 1000.0 * ms[size_t(repeats / 2)];
}

void bench_rmsnorm(int64_t rows) {
  const size_t n = size_t(rows) * kHidden;
  const size_t bytes = n * (4 + 2 + 4 + 2);  // residual read + delta read + residual write + out write
  const int sets = rotation_sets(bytes);
  std::vector<std::unique_ptr<Dev<float>>> res;
  std::vector<std::unique_ptr<Dev<__nv_bfloat16>>> delta, out;
  Dev<float> gamma(kHidden);
  random_f32(gamma.p, kHidden, 0.3f, 1.0f);
  for (int s = 0; s < sets; ++s) {
    res.push_back(std::make_unique<Dev<float>>(n));
    delta.push_back(std::make_unique<Dev<__nv_bfloat16>>(n));
    out.push_back(std::make_unique<Dev<__nv_bfloat16>>(n));
    random_f32(res.back()->p, n, 2.0f, 0.0f);
    random_bf16(delta.back()->p, n, 1e-3f);  // small: repeated adds keep the residual bounded
  }
  const double us = median_us(
      [&](int s) {
        norm::rmsnorm_residual(res[size_t(s)]->p, delta[size_t(s)]->p, gamma.p, out[size_t(s)]->p, rows,
                               kHidden, 1e-5f, nullptr);
      },
      sets);
  add_row(
      {"rmsnorm+residual", "T=" + std::to_string(rows) + " H=2880 +delta", us, 0, double(bytes) / us / 1e3});
}

// One sequence of `tokens` new tokens at start_pos; pages of `ps` in a random order.
struct PagedSetup {
  std::vector<int32_t> table;
  int num_pages = 0;
};
PagedSetup random_pages(int total_tokens, int ps, std::mt19937_64& rng) {
  PagedSetup s;
  s.num_pages = (total_tokens + ps - 1) / ps;
  s.table.resize(size_t(s.num_pages));
  std::iota(s.table.begin(), s.table.end(), 0);
  std::shuffle(s.table.begin(), s.table.end(), rng);
  return s;
}

void bench_rope(int tokens, int ps) {
  std::mt19937_64 rng(1);
  const int width = (kHq + 2 * kHkv) * 64;
  const PagedSetup pages = random_pages(tokens, ps, rng);
  AttentionPlanBuilder plan;
  PlanOptions o;
  plan.build({{0, tokens, 0, 0, 0}}, tokens, o);
  Dev<int32_t> blob(plan.blob().size()), table(pages.table.size());
  ORCHID_CUDA_CHECK(cudaMemcpy(blob.p, plan.blob().data(), plan.blob_bytes(), cudaMemcpyHostToDevice));
  ORCHID_CUDA_CHECK(cudaMemcpy(table.p, pages.table.data(), pages.table.size() * 4, cudaMemcpyHostToDevice));
  const size_t pool = kv_pool_elements(pages.num_pages, kHkv, ps);
  const size_t bytes = size_t(tokens) * (size_t(width) * 2 + size_t(kHq) * 128 + 2 * size_t(kHkv) * 128);
  const int sets = rotation_sets(bytes);
  std::vector<std::unique_ptr<Dev<__nv_bfloat16>>> qkv, q, k, v;
  for (int s = 0; s < sets; ++s) {
    qkv.push_back(std::make_unique<Dev<__nv_bfloat16>>(size_t(tokens) * width));
    q.push_back(std::make_unique<Dev<__nv_bfloat16>>(size_t(tokens) * kHq * 64));
    k.push_back(std::make_unique<Dev<__nv_bfloat16>>(pool));
    v.push_back(std::make_unique<Dev<__nv_bfloat16>>(pool));
    random_bf16(qkv.back()->p, size_t(tokens) * width, 2.0f);
  }
  Dev<float> bias(static_cast<size_t>(width));
  random_f32(bias.p, size_t(width), 0.5f, 0.0f);
  const AttentionPlan view = plan.device_view(blob.p);
  RopeKvWriteArgs a;
  for (int j = 0; j < 32; ++j) a.rope.inv_freq[j] = std::pow(150000.0f, -float(j) / 32.0f);
  a.rope.concentration = 1.3465736f;
  a.bias = bias.p;
  a.bias_fp32 = true;
  a.page_table = table.p;
  a.page_size = ps;
  const double us = median_us(
      [&](int s) {
        RopeKvWriteArgs x = a;
        x.qkv = qkv[size_t(s)]->p;
        x.q_out = q[size_t(s)]->p;
        x.k_pool = k[size_t(s)]->p;
        x.v_pool = v[size_t(s)]->p;
        rope_kv_write(x, view, nullptr);
      },
      sets);
  add_row({"qkv_rope_kv_write", "T=" + std::to_string(tokens) + " 64/8 heads page " + std::to_string(ps), us,
           0, double(bytes) / us / 1e3});
}

// One sequence of `num_q` new tokens after `start` cached ones over shuffled pages: its plan and page table
// on the device.
struct OneSequenceStep {
  AttentionPlanBuilder plan;
  PagedSetup pages;
  std::unique_ptr<Dev<int32_t>> blob, table;
  size_t pool = 0;  // K or V pool elements
  AttentionPlan view;
  OneSequenceStep(int num_q, int start, int ps, uint64_t seed, int prefill_rows = kPrefillBlockM,
                  bool balance = false) {
    std::mt19937_64 rng(seed);
    pages = random_pages(start + num_q, ps, rng);
    PlanOptions o;
    o.sm_count = device_info().sm_count;
    o.prefill_rows = prefill_rows;
    o.balance_prefill = balance && prefill_balance_enabled();  // as the runtime plans Hopper prefill
    plan.build({{0, num_q, start, 0, 0}}, num_q, o);
    blob = std::make_unique<Dev<int32_t>>(plan.blob().size());
    table = std::make_unique<Dev<int32_t>>(pages.table.size());
    ORCHID_CUDA_CHECK(cudaMemcpy(blob->p, plan.blob().data(), plan.blob_bytes(), cudaMemcpyHostToDevice));
    ORCHID_CUDA_CHECK(
        cudaMemcpy(table->p, pages.table.data(), pages.table.size() * 4, cudaMemcpyHostToDevice));
    pool = kv_pool_elements(pages.num_pages, kHkv, ps);
    view = plan.device_view(blob->p);
  }
};

// Prefill of `num_q` new tokens after `start` cached ones, one sequence; returns microseconds.
// `rows`: the plan's prefill tile (128, or 192 for the Hopper kernel's three consumer warpgroups).
// `fp8`: an e4m3 KV cache (the mma.sync kernel's FP8 variant); its pools hold e4m3 1.0 everywhere (the
// kernels' time does not depend on the values).
double bench_prefill(int num_q, int start, int window, int ps, const char* label, PrefillVariant variant,
                     int rows = kPrefillBlockM, bool fp8 = false) {
  const OneSequenceStep st(num_q, start, ps, 2, rows, variant == PrefillVariant::kHopper);
  Dev<uint8_t> workspace(std::max<size_t>(st.plan.workspace_bytes(), 16));
  const size_t pool = st.pool;
  const size_t qn = size_t(num_q) * kHq * 64;
  const int sets = rotation_sets((2 * pool + 2 * qn) * 2, 4);
  std::vector<std::unique_ptr<Dev<__nv_bfloat16>>> q, k, v, out;
  for (int s = 0; s < sets; ++s) {
    q.push_back(std::make_unique<Dev<__nv_bfloat16>>(qn));
    k.push_back(std::make_unique<Dev<__nv_bfloat16>>(pool));
    v.push_back(std::make_unique<Dev<__nv_bfloat16>>(pool));
    out.push_back(std::make_unique<Dev<__nv_bfloat16>>(qn));
    random_bf16(q.back()->p, qn, 2.0f);
    random_bf16(k.back()->p, pool, 2.0f);
    random_bf16(v.back()->p, pool, 1.0f);
    if (fp8) {
      ORCHID_CUDA_CHECK(cudaMemset(k.back()->p, kE4m3One, pool));
      ORCHID_CUDA_CHECK(cudaMemset(v.back()->p, kE4m3One, pool));
    }
  }
  Dev<float> sinks(kHq);
  random_f32(sinks.p, kHq, 2.0f, 1.0f);
  const AttentionPlan& view = st.view;
  SinkAttentionArgs a;
  a.page_table = st.table->p;
  a.page_size = ps;
  a.num_pages = st.pages.num_pages;
  a.sinks = sinks.p;
  a.window = window;
  a.prefill_variant = variant;
  a.kv_fp8 = fp8;
  const double us = median_us(
      [&](int s) {
        SinkAttentionArgs x = a;
        x.q = q[size_t(s)]->p;
        x.k_pool = k[size_t(s)]->p;
        x.v_pool = v[size_t(s)]->p;
        x.out = out[size_t(s)]->p;
        sink_attention_prefill(x, view, workspace.p, nullptr);
      },
      sets);
  double keys = 0;
  for (int i = 0; i < num_q; ++i) {
    const int p = start + i;
    keys += window > 0 ? std::min(p + 1, window) : p + 1;
  }
  const double flops = 4.0 * 64 * kHq * keys;
  std::string shape = std::string(label) + " q=" + std::to_string(num_q) + "@" + std::to_string(start) +
                      (window > 0 ? " win " + std::to_string(window) : " causal") + " p" +
                      std::to_string(ps) +
                      (view.num_split_tiles > 0 ? " split " + std::to_string(view.num_split_tiles) : "");
  const std::string kernel = variant == PrefillVariant::kHopper ? "prefill_hopper_" + std::to_string(rows)
                             : fp8                              ? "prefill_mma_fp8kv"
                                                                : "prefill_mma_sync";
  add_row({kernel, shape, us, flops / us / 1e6, 0});
  return us;
}

// Median microseconds of precise_sink_attention with `a` (table, page size, window, q stride set) over
// `view`'s `tokens` rows, on rotating sets of random fp32 q, K/V pools of `pool` elements and hi/lo outputs;
// `bytes_read` (what a launch reads and writes) sets how many sets keep the L2 from serving repeats.
double time_precise(PreciseAttentionArgs a, const AttentionPlan& view, size_t tokens, size_t pool,
                    size_t bytes_read) {
  const size_t qn = tokens * size_t(a.q_stride), on = tokens * kHq * 64;
  const int sets = rotation_sets(bytes_read, 4);
  std::vector<std::unique_ptr<Dev<float>>> q, k, v;
  std::vector<std::unique_ptr<Dev<__nv_bfloat16>>> hi, lo;
  for (int s = 0; s < sets; ++s) {
    q.push_back(std::make_unique<Dev<float>>(qn));
    k.push_back(std::make_unique<Dev<float>>(pool));
    v.push_back(std::make_unique<Dev<float>>(pool));
    hi.push_back(std::make_unique<Dev<__nv_bfloat16>>(on));
    lo.push_back(std::make_unique<Dev<__nv_bfloat16>>(on));
    random_f32(q.back()->p, qn, 2.0f, 0.0f);
    random_f32(k.back()->p, pool, 2.0f, 0.0f);
    random_f32(v.back()->p, pool, 1.0f, 0.0f);
  }
  Dev<float> sinks(kHq);
  random_f32(sinks.p, kHq, 2.0f, 1.0f);
  a.sinks = sinks.p;
  return median_us(
      [&](int s) {
        PreciseAttentionArgs x = a;
        x.q = q[size_t(s)]->p;
        x.k_pool = k[size_t(s)]->p;
        x.v_pool = v[size_t(s)]->p;
        x.out_hi = hi[size_t(s)]->p;
        x.out_lo = lo[size_t(s)]->p;
        precise_sink_attention(x, view, nullptr);
      },
      sets);
}

PreciseAttentionArgs precise_args(const int32_t* table, TableKind kind, int ps) {
  PreciseAttentionArgs a;
  a.q_stride = (kHq + 2 * kHkv) * 64;  // q inside fp32 QKV rows
  a.page_table = table;
  a.table_kind = kind;
  a.page_size = ps;
  a.window = 128;
  return a;
}

// The precise layer's fp32 attention (CUDA cores): `num_q` tokens of one sequence from `start`, window 128,
// q inside fp32 QKV rows; useful FLOPs against the FP32 CUDA-core ceiling.
double bench_precise(int num_q, int start, int ps) {
  const OneSequenceStep st(num_q, start, ps, 4);
  const size_t bytes = (2 * st.pool + size_t(num_q) * ((kHq + 2 * kHkv) * 64 + kHq * 64)) * 4;
  const double us =
      time_precise(precise_args(st.table->p, kFullTable, ps), st.view, size_t(num_q), st.pool, bytes);
  double keys = 0;
  for (int i = 0; i < num_q; ++i) keys += std::min(start + i + 1, 128);
  Row r{"precise_fp32",
        "q=" + std::to_string(num_q) + "@" + std::to_string(start) + " win 128 p" + std::to_string(ps), us,
        4.0 * 64 * kHq * keys / us / 1e6, 0};
  r.peak_tflops = kPeakFp32Tflops;
  add_row(r);
  return us;
}

// A decode step's plan: `batch` sequences of `queries` new tokens each, the last at position ctx - 1, on
// shuffled pages (the same row of page ids serves both tables).
struct DecodeStep {
  AttentionPlanBuilder plan;
  std::unique_ptr<Dev<int32_t>> blob, table;
  int num_pages = 0;
  AttentionPlan view;
  DecodeStep(int batch, int ctx, int window, int ps, int queries, int max_decode_queries) {
    std::mt19937_64 rng(3);
    const int pages_per_seq = (ctx + ps - 1) / ps;
    num_pages = pages_per_seq * batch;
    std::vector<int32_t> ids(static_cast<size_t>(num_pages));
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    std::vector<PlanSequence> seqs;
    for (int b = 0; b < batch; ++b)
      seqs.push_back({b * queries, queries, ctx - queries, b * pages_per_seq, b * pages_per_seq});
    PlanOptions o;
    o.sm_count = device_info().sm_count;
    o.max_decode_queries = max_decode_queries;
    o.window = window;  // a window's launches take its own (smaller) split count
    plan.build(seqs, batch * queries, o);
    blob = std::make_unique<Dev<int32_t>>(plan.blob().size());
    table = std::make_unique<Dev<int32_t>>(ids.size());
    ORCHID_CUDA_CHECK(cudaMemcpy(blob->p, plan.blob().data(), plan.blob_bytes(), cudaMemcpyHostToDevice));
    ORCHID_CUDA_CHECK(cudaMemcpy(table->p, ids.data(), ids.size() * 4, cudaMemcpyHostToDevice));
    view = plan.device_view(blob->p);
  }
};

// The precise layer's fp32 attention in a decode step: `batch` sequences, one token each at position ctx - 1,
// window 128 (layer 0 of gpt-oss). Bytes: the window's fp32 K/V rows, q and the hi/lo outputs.
double bench_precise_decode(int batch, int ctx, int ps) {
  const DecodeStep st(batch, ctx, 128, ps, 1, 1);
  const size_t bytes =
      size_t(batch) * std::min(ctx, 128) * kHkv * 64 * 2 * 4 + size_t(batch) * kHq * 64 * (4 + 2 * 2);
  const double us = time_precise(precise_args(st.table->p, kSlidingTable, ps), st.view, size_t(batch),
                                 kv_pool_elements(st.num_pages, kHkv, ps), bytes);
  add_row({"precise_decode",
           "B=" + std::to_string(batch) + " ctx " + std::to_string(ctx) + " win 128 p" + std::to_string(ps),
           us, 0, double(bytes) / us / 1e3});
  return us;
}

// `batch` decodes at context `ctx` each; returns microseconds. With queries > 1, a speculative verify step
// (1 + k query tokens a sequence, the last at ctx - 1), through the decode kernel, or with
// `through_prefill` the prefill kernel the plan sent such sequences to before (for the comparison).
// `fp8`: an e4m3 KV cache (pools of e4m3 1.0: the time does not depend on the values), half the K/V bytes.
double bench_decode(int batch, int ctx, int window, int ps, int queries = 1, bool through_prefill = false,
                    bool fp8 = false) {
  const DecodeStep st(batch, ctx, window, ps, queries, through_prefill ? 1 : queries);
  const size_t pool = kv_pool_elements(st.num_pages, kHkv, ps);
  const size_t qn = size_t(batch) * queries * kHq * 64;
  const int keys = window > 0 ? std::min(ctx, window + queries - 1) : ctx;
  const size_t bytes = size_t(batch) * keys * kHkv * 64 * 2 * (fp8 ? 1 : 2) + 2 * qn * 2;
  const int sets = rotation_sets(bytes, 32);
  std::vector<std::unique_ptr<Dev<__nv_bfloat16>>> q, k, v, out;
  for (int s = 0; s < sets; ++s) {
    q.push_back(std::make_unique<Dev<__nv_bfloat16>>(qn));
    k.push_back(std::make_unique<Dev<__nv_bfloat16>>(pool));
    v.push_back(std::make_unique<Dev<__nv_bfloat16>>(pool));
    out.push_back(std::make_unique<Dev<__nv_bfloat16>>(qn));
    random_bf16(q.back()->p, qn, 2.0f);
    random_bf16(k.back()->p, pool, 2.0f);
    random_bf16(v.back()->p, pool, 1.0f);
    if (fp8) {
      ORCHID_CUDA_CHECK(cudaMemset(k.back()->p, kE4m3One, pool));
      ORCHID_CUDA_CHECK(cudaMemset(v.back()->p, kE4m3One, pool));
    }
  }
  Dev<float> sinks(kHq);
  random_f32(sinks.p, kHq, 2.0f, 1.0f);
  Dev<uint8_t> workspace(st.plan.decode_workspace_bytes());
  const AttentionPlan& view = st.view;
  SinkAttentionArgs a;
  a.page_table = st.table->p;
  a.page_size = ps;
  a.sinks = sinks.p;
  a.window = window;
  a.kv_fp8 = fp8;
  const double us = median_us(
      [&](int s) {
        SinkAttentionArgs x = a;
        x.q = q[size_t(s)]->p;
        x.k_pool = k[size_t(s)]->p;
        x.v_pool = v[size_t(s)]->p;
        x.out = out[size_t(s)]->p;
        sink_attention(x, view, workspace.p, nullptr);
      },
      sets);
  std::string shape = "B=" + std::to_string(batch) + " ctx " + std::to_string(ctx) +
                      (window > 0 ? " win " + std::to_string(window) : " full") + " p" + std::to_string(ps) +
                      (queries > 1 ? " q" + std::to_string(queries) : "") + (fp8 ? " fp8kv" : "") +
                      (through_prefill ? " prefill kernel"
                                       : " splits " + std::to_string(window > 0 ? view.decode_splits_window
                                                                                : view.decode_splits));
  add_row({queries > 1 ? "verify_attention" : "decode_attention", shape, us, 0, double(bytes) / us / 1e3});
  return us;
}

// The decode rows at the shapes of serving: one sequence to 128k, 8 and 64 sequences, 128-key windows; the
// same with an e4m3 cache, which reads half the K/V bytes.
void decode_rows(bool fp8) {
  bench_decode(1, 32768, 0, 16, 1, false, fp8);
  bench_decode(1, 131072, 0, 64, 1, false, fp8);
  bench_decode(8, 8192, 0, 16, 1, false, fp8);
  bench_decode(64, 4096, 0, 16, 1, false, fp8);
  bench_decode(64, 32768, 0, 16, 1, false, fp8);
  bench_decode(64, 4096, 128, 16, 1, false, fp8);
}

// The prefill shape of --prefill-at (num_q = 0: none).
struct PrefillAt {
  int num_q = 0, start = 0, window = 0;
};
// The decode shape of --decode-at (batch = 0: none).
struct DecodeAt {
  int batch = 0, ctx = 0;
  bool fp8 = false;
};

int run(bool quick, bool prefill_only, bool decode_only, PrefillAt at, DecodeAt dat) {
  const DeviceInfo& dev = device_info();
  cudaDeviceProp prop{};
  ORCHID_CUDA_CHECK(cudaGetDeviceProperties(&prop, dev.device));
  std::printf("device: %s, %d SMs, L2 %lld MB; ceilings %.0f TFLOP/s BF16, %.2f TB/s HBM\n", prop.name,
              dev.sm_count, dev.l2_bytes >> 20, kPeakTflops, kPeakTBs);
  std::printf("%-18s %-44s %11s  %-16s  %s\n", "kernel", "shape", "median_us", "achieved",
              "fraction of ceiling");
  if (dat.batch > 0) {
    bench_decode(dat.batch, dat.ctx, 0, 16, 1, false, dat.fp8);
    return 0;
  }
  if (decode_only) {
    for (bool fp8 : {false, true}) {
      bench_decode(1, 4096, 0, 16, 1, false, fp8);
      decode_rows(fp8);
    }
    bench_decode(32, 8192, 0, 16, 5, false, true);
    for (int b : {1, 64, 256}) bench_precise_decode(b, 1024, 16);
    return 0;
  }

  if (!prefill_only) {
    for (int64_t t : {int64_t(1), int64_t(8192), int64_t(32768)}) bench_rmsnorm(t);
    bench_rope(8192, 16);
    if (!quick) bench_rope(32768, 64);
  }

  // Both prefill kernels on each shape; projections use the faster one.
  auto prefill = [](int num_q, int start, int window, int ps, const char* label) {
    const double a = bench_prefill(num_q, start, window, ps, label, PrefillVariant::kMmaSync);
    const double b = bench_prefill(num_q, start, window, ps, label, PrefillVariant::kHopper, kPrefillBlockM);
    const double c =
        bench_prefill(num_q, start, window, ps, label, PrefillVariant::kHopper, kPrefillBlockMHopper);
    return std::min(a, std::min(b, c));
  };
  if (at.num_q > 0) {
    prefill(at.num_q, at.start, at.window, 16, "at");
    return 0;
  }
  const double full_8k = prefill(8192, 0, 0, 16, "20b");
  const double slide_8k = prefill(8192, 0, 128, 16, "20b");
  double full_32k = 0, slide_32k = 0;
  if (!quick) {
    prefill(4096, 0, 0, 64, "20b");
    full_32k = prefill(32768, 0, 0, 16, "20b");
    prefill(32768, 0, 0, 64, "20b");
    slide_32k = prefill(32768, 0, 128, 16, "20b");
    prefill(2048, 30720, 0, 16, "chunk");
  }
  if (prefill_only) return 0;
  // The precise first layer's fp32 attention: prefill of 8k (32k) and one decode token.
  const double precise_8k = bench_precise(8192, 0, 16);
  if (!quick) bench_precise(32768, 0, 16);
  const double precise_dec = bench_precise(1, 4095, 16);
  for (int b : {64, 256}) bench_precise_decode(b, 1024, 16);
  const double dec_full_4k = bench_decode(1, 4096, 0, 16);
  const double dec_slide = bench_decode(1, 4096, 128, 16);
  double dec_full_32k = 0;
  if (!quick) {
    dec_full_32k = bench_decode(1, 32768, 0, 16);
    bench_decode(1, 131072, 0, 64);
    bench_decode(8, 8192, 0, 16);
    bench_decode(64, 4096, 0, 16);
    bench_decode(64, 32768, 0, 16);
    bench_decode(64, 4096, 128, 16);
  }
  // The FP8 KV cache: decode reads half the bytes (the same shapes), prefill pays the widening.
  bench_decode(1, 4096, 0, 16, 1, false, true);
  if (!quick) {
    decode_rows(true);
    bench_decode(32, 8192, 0, 16, 5, false, true);
    bench_prefill(8192, 0, 0, 16, "20b", PrefillVariant::kMmaSync, kPrefillBlockM, true);
    bench_prefill(32768, 0, 0, 16, "20b", PrefillVariant::kMmaSync, kPrefillBlockM, true);
    bench_prefill(2048, 30720, 0, 16, "chunk", PrefillVariant::kMmaSync, kPrefillBlockM, true);
  }
  // Speculative verify steps (1 + 4 queries a sequence): the decode kernel, and the prefill kernel for
  // comparison (K/V bytes as for one query: each is read once).
  for (bool through_prefill : {false, true}) {
    bench_decode(1, 8192, 0, 16, 5, through_prefill);
    bench_decode(1, 8192, 128, 16, 5, through_prefill);
    bench_decode(32, 8192, 0, 16, 5, through_prefill);
  }

  std::printf(
      "\nprojections (gpt-oss-20b: 12 full + 12 sliding layers; attention kernels only, faster prefill "
      "kernel)\n");
  std::printf("  prefill  8k: %.1f ms attention (precise first layer: +%.2f ms)\n",
              (12 * full_8k + 12 * slide_8k) / 1e3, (precise_8k - slide_8k) / 1e3);
  if (!quick)
    std::printf("  prefill 32k: %.1f ms attention (target: <= ~300 ms of the 1.0 s bar)\n",
                (12 * full_32k + 12 * slide_32k) / 1e3);
  std::printf("  decode B=1 ctx 4k: %.1f us/token attention", 12 * dec_full_4k + 12 * dec_slide);
  if (!quick) std::printf(", ctx 32k: %.1f us/token", 12 * dec_full_32k + 12 * dec_slide);
  std::printf(" (300 tok/s budget: 3333 us/token for everything); precise first layer +%.1f us\n",
              precise_dec - dec_slide);
  return 0;
}

}  // namespace
}  // namespace orchid::kernels::attention

int main(int argc, char** argv) {
  bool quick = false, prefill_only = false, decode_only = false;
  orchid::kernels::attention::PrefillAt at;
  orchid::kernels::attention::DecodeAt dat;
  auto number = [&](int i) {
    char* end = nullptr;
    const long v = i < argc ? std::strtol(argv[i], &end, 10) : -1;
    return i < argc && *end == 0 && v >= 0 && v <= (1 << 20) ? int(v) : -1;
  };
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else if (std::strcmp(argv[i], "--prefill") == 0) {
      prefill_only = true;
    } else if (std::strcmp(argv[i], "--decode") == 0) {
      decode_only = true;
    } else if (std::strcmp(argv[i], "--prefill-at") == 0 && number(i + 1) > 0 && number(i + 2) >= 0) {
      at.num_q = number(i + 1);
      at.start = number(i + 2);
      i += 2;
      if (number(i + 1) >= 0) at.window = number(++i);
      prefill_only = true;
    } else if (std::strcmp(argv[i], "--decode-at") == 0 && number(i + 1) > 0 && number(i + 2) > 0) {
      dat.batch = number(i + 1);
      dat.ctx = number(i + 2);
      i += 2;
      if (i + 1 < argc && (std::strcmp(argv[i + 1], "fp8") == 0 || std::strcmp(argv[i + 1], "bf16") == 0))
        dat.fp8 = std::strcmp(argv[++i], "fp8") == 0;
    } else {
      std::fprintf(
          stderr,
          "usage: attention_bench [--quick] [--prefill | --decode | --prefill-at NUM_Q START [WINDOW] |\n"
          "                        --decode-at BATCH CTX [bf16|fp8]]\n");
      return 2;
    }
  }
  try {
    return orchid::kernels::attention::run(quick, prefill_only, decode_only, at, dat);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "attention_bench: %s\n", e.what());
    return 1;
  }
}
