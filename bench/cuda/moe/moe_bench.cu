// GEMM and MoE kernel micro-benchmarks on the gpt-oss shapes. One binary, one line per case, then a summary
// table: median time over timed repetitions (CUDA events, after warm-up), inputs rotated across enough
// copies to exceed the 60 MB L2, and the achieved fraction of the measured H200 ceilings (hopper.md):
// 742 TFLOP/s BF16, 1332 TFLOP/s FP8, 4.17 TB/s HBM (bytes read + written).
//
//   moe_bench [--quick] [--filter SUBSTRING] [--tag TEXT]
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/common/cuda_check.h"
#include "kernels/gemm/dense_gemm.h"
#include "kernels/gemm/grouped_gemm.h"
#include "kernels/moe/moe_activation.h"
#include "kernels/moe/moe_layer.h"
#include "kernels/moe/mxfp4_gemm.h"
#include "kernels/moe/mxfp4_tiled_gemm.h"
#include "kernels/moe/mxfp4_w4a8_gemm.h"
#include "kernels/moe/mxfp4_word_order.h"
#include "kernels/moe/norm_route.h"
#include "kernels/moe/router_route.h"
#include "kernels/moe/routing.h"
#include "kernels/moe/weight_convert.h"
#include "kernels/norm/rmsnorm.h"

namespace {

using namespace orchid::kernels;

constexpr double kBf16Tflops = 742.0, kFp8Tflops = 1332.0, kHbmTBs = 4.17;
constexpr size_t kRotateBytes = size_t(256) << 20;  // > 4x L2: every repetition reads cold data

// ---- device-side random fill (so multi-GB inputs need no host generation) ----
__device__ uint64_t splitmix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
enum class Fill { kBytes, kBf16, kFp8, kE8m0, kScale };
__global__ void fill_kernel(uint8_t* p, size_t n, uint64_t seed, Fill f) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const uint64_t r = splitmix(seed * 0x100000001B3ull + i);
    switch (f) {
      case Fill::kBytes:
        p[i] = uint8_t(r);
        break;
      case Fill::kBf16:
        if (i % 2 == 0) {
          const float v = (float(r & 0xffffff) / float(0x1000000) - 0.5f) * 2.0f;
          reinterpret_cast<__nv_bfloat16*>(p)[i / 2] = __float2bfloat16(v);
        }
        break;
      case Fill::kFp8: {
        const uint8_t b = uint8_t(r) & 0xbf;  // exponent < 8: |v| < 1, never the NaN code
        p[i] = b;
        break;
      }
      case Fill::kE8m0:
        p[i] = uint8_t(118 + r % 7);
        break;
      case Fill::kScale:
        if (i % 4 == 0) reinterpret_cast<float*>(p)[i / 4] = 0.5f + float(r & 0xffff) / 65536.0f;
        break;
    }
  }
}

struct Buf {
  void* p = nullptr;
  size_t bytes = 0;
  Buf() = default;
  Buf(size_t n, Fill f, uint64_t seed) : bytes(n) {
    ORCHID_CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(n, 256)));
    if (n) fill_kernel<<<1024, 256>>>(static_cast<uint8_t*>(p), n, seed, f);
    ORCHID_CUDA_CHECK_LAUNCH();
  }
  ~Buf() {
    if (p) cudaFree(p);
  }
  Buf(Buf&& o) noexcept : p(o.p), bytes(o.bytes) { o.p = nullptr; }
  Buf(const Buf&) = delete;
  template <typename T>
  T* as() const {
    return static_cast<T*>(p);
  }
};

int copies_for(size_t bytes) {
  return int(std::clamp<size_t>((kRotateBytes + bytes - 1) / std::max<size_t>(bytes, 1), 1, 16));
}

struct Options {
  bool quick = false;
  std::string filter, tag;
};

struct Row {
  std::string name, shape;
  double us, value, ceiling;
  const char* unit;
};
std::vector<Row> g_rows;

// Median of per-repetition event times; fn(rep) must enqueue one repetition on `stream`.
double median_us(cudaStream_t stream, int warmup, int reps, const std::function<void(int)>& fn) {
  for (int i = 0; i < warmup; ++i) fn(i);
  std::vector<cudaEvent_t> ev(2 * reps);
  for (auto& e : ev) ORCHID_CUDA_CHECK(cudaEventCreate(&e));
  for (int i = 0; i < reps; ++i) {
    ORCHID_CUDA_CHECK(cudaEventRecord(ev[2 * i], stream));
    fn(warmup + i);
    ORCHID_CUDA_CHECK(cudaEventRecord(ev[2 * i + 1], stream));
  }
  ORCHID_CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<float> ms(reps);
  for (int i = 0; i < reps; ++i) ORCHID_CUDA_CHECK(cudaEventElapsedTime(&ms[i], ev[2 * i], ev[2 * i + 1]));
  for (auto& e : ev) cudaEventDestroy(e);
  std::sort(ms.begin(), ms.end());
  return 1000.0 * ms[reps / 2];
}

void report(const std::string& name, const std::string& shape, double us, double flops, double bytes,
            double tflops_ceiling) {
  Row r;
  r.name = name;
  r.shape = shape;
  r.us = us;
  if (flops > 0 && tflops_ceiling > 0) {
    r.value = flops / (us * 1e-6) / 1e12;
    r.ceiling = tflops_ceiling;
    r.unit = "TFLOP/s";
  } else {
    r.value = bytes / (us * 1e-6) / 1e12;
    r.ceiling = kHbmTBs;
    r.unit = "TB/s";
  }
  std::printf("%-34s %-30s %10.1f us %9.2f %-7s %5.1f%% of ceiling\n", r.name.c_str(), r.shape.c_str(), r.us,
              r.value, r.unit, 100.0 * r.value / r.ceiling);
  std::fflush(stdout);
  g_rows.push_back(r);
}

bool want(const Options& o, const std::string& name) {
  return o.filter.empty() || name.find(o.filter) != std::string::npos;
}

std::string shape3(int m, int n, int k) {
  return "m" + std::to_string(m) + " n" + std::to_string(n) + " k" + std::to_string(k);
}

// ---------------------------------------------------------------- dense (cuBLASLt)
void bench_dense(const Options& o, cudaStream_t s, DenseGemm& gemm) {
  struct C {
    const char* name;
    int m, n, k;
    GemmOut out;
    bool bias;
  };
  const C cases[] = {{"dense qkv prefill", 8192, 5120, 2880, GemmOut::kBf16, true},
                     {"dense oproj prefill", 8192, 2880, 4096, GemmOut::kBf16, true},
                     {"dense lm_head prefill-chunk", 2048, 201088, 2880, GemmOut::kF32, false},
                     {"dense qkv decode", 1, 5120, 2880, GemmOut::kBf16, true},
                     {"dense oproj decode", 1, 2880, 4096, GemmOut::kBf16, true},
                     {"dense router decode", 1, 32, 2880, GemmOut::kF32, true},
                     {"dense qkv batch8", 8, 5120, 2880, GemmOut::kBf16, true},
                     {"dense oproj batch8", 8, 2880, 4096, GemmOut::kBf16, true},
                     {"dense router split batch8", 16, 32, 2880, GemmOut::kF32, false},
                     {"dense lm_head decode", 1, 201088, 2880, GemmOut::kF32, false},
                     {"dense lm_head batch64", 64, 201088, 2880, GemmOut::kF32, false}};
  const DenseGemm::TimingScope timing;  // choices timed at first use, as in a graphed decode step
  for (const C& c0 : cases) {
    for (int pol = 0; pol < (c0.m <= 16 ? 2 : 1); ++pol) {
      C c = c0;
      const std::string label = std::string(c0.name) + (c0.m > 16 ? "" : pol == 0 ? " cublas" : " orchid");
      c.name = label.c_str();
      gemm.set_small_m(c0.m > 16  ? DenseGemm::SmallM::kMeasured
                       : pol == 0 ? DenseGemm::SmallM::kCublas
                                  : DenseGemm::SmallM::kOrchid);
      if (!want(o, c.name)) continue;
      const size_t wbytes = size_t(c.n) * c.k * 2, xbytes = size_t(c.m) * c.k * 2;
      const size_t ybytes = size_t(c.m) * c.n * (c.out == GemmOut::kF32 ? 4 : 2);
      const int copies = copies_for(wbytes + xbytes);
      std::vector<Buf> w, x;
      for (int i = 0; i < copies; ++i) {
        w.emplace_back(wbytes, Fill::kBf16, 10 + i);
        x.emplace_back(xbytes, Fill::kBf16, 100 + i);
      }
      Buf bias(size_t(c.n) * 4, c.out == GemmOut::kF32 ? Fill::kScale : Fill::kBf16, 7),
          y(ybytes, Fill::kBytes, 8);
      const double us = median_us(s, 3, o.quick ? 10 : 30, [&](int i) {
        DenseGemmArgs a;
        a.m = c.m;
        a.n = c.n;
        a.k = c.k;
        a.x = x[i % copies].p;
        a.w = w[i % copies].p;
        a.bias = c.bias ? bias.p : nullptr;
        a.y = y.p;
        a.out = c.out;
        gemm.run(a, s);
      });
      const double flops = 2.0 * c.m * c.n * c.k;
      const bool bw_bound = c.m <= 64;
      report(c.name, shape3(c.m, c.n, c.k), us, bw_bound ? 0 : flops, double(wbytes + xbytes + ybytes),
             bw_bound ? 0 : kBf16Tflops);
    }
  }
  gemm.set_small_m(DenseGemm::SmallM::kMeasured);
}

// Uniform routing of T tokens over E experts with top-k: realistic per-expert row counts.
std::vector<int> uniform_offsets(int tokens, int experts, int top_k, uint64_t seed) {
  std::vector<int> cnt(experts, 0);
  uint64_t x = seed;
  for (int t = 0; t < tokens; ++t) {
    std::vector<int> picked;
    while (int(picked.size()) < top_k) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      const int e = int((x >> 33) % uint64_t(experts));
      if (std::find(picked.begin(), picked.end(), e) == picked.end()) picked.push_back(e);
    }
    for (int e : picked) cnt[e]++;
  }
  std::vector<int> off(experts + 1, 0);
  for (int e = 0; e < experts; ++e) off[e + 1] = off[e] + cnt[e];
  return off;
}

// ---------------------------------------------------------------- grouped (CUTLASS)
void bench_grouped(const Options& o, cudaStream_t s) {
  struct C {
    const char* proj;
    int n, k;
  };
  const C projs[] = {{"gate_up", 5760, 2880}, {"down", 2880, 2880}};
  std::vector<int> token_counts = {1, 8, 64, 1024, 8192};
  if (!o.quick) token_counts.push_back(32768);
  struct V {
    bool fp8;
    Fp8GroupedConfig config;
    const char* label;
  };
  const V variants[] = {{true, Fp8GroupedConfig::kCooperative128x128, "grouped fp8 coop "},
                        {true, Fp8GroupedConfig::kPingpong64x128, "grouped fp8 pingpong "},
                        {false, Fp8GroupedConfig::kCooperative128x128, "grouped bf16 "}};
  for (const V& v : variants) {
    const bool fp8 = v.fp8;
    for (const C& p : projs) {
      for (int T : token_counts) {
        const int E = 32, K = 4, M = T * K, kp = fp8 ? round_up_128(p.k) : p.k;
        const std::string name = std::string(v.label) + p.proj + " T" + std::to_string(T);
        if (!want(o, name)) continue;
        const auto off = uniform_offsets(T, E, K, 1234 + T);
        int active = 0;
        for (int e = 0; e < E; ++e) active += off[e + 1] > off[e];
        const size_t eb = fp8 ? 1 : 2;
        const size_t wbytes = size_t(E) * p.n * kp * eb, abytes = size_t(M) * kp * eb;
        const int copies = copies_for(wbytes + abytes);
        std::vector<Buf> w, a, ws_;
        for (int i = 0; i < copies; ++i) {
          w.emplace_back(wbytes, fp8 ? Fill::kFp8 : Fill::kBf16, 20 + i);
          a.emplace_back(abytes, fp8 ? Fill::kFp8 : Fill::kBf16, 200 + i);
        }
        Buf sa(size_t(M) * (kp / 128) * 4, Fill::kScale, 3),
            sb(size_t(E) * ((p.n + 127) / 128) * (kp / 128) * 4, Fill::kScale, 4);
        Buf d(size_t(M) * p.n * 2, Fill::kBytes, 5);
        Buf doff((E + 1) * 4, Fill::kBytes, 0);
        ORCHID_CUDA_CHECK(cudaMemcpy(doff.p, off.data(), (E + 1) * 4, cudaMemcpyHostToDevice));
        const size_t wsb = fp8 ? grouped_gemm_fp8_workspace_bytes(E) : grouped_gemm_bf16_workspace_bytes(E);
        Buf ws(wsb, Fill::kBytes, 0);
        const double us = median_us(s, 3, o.quick ? 10 : 20, [&](int i) {
          GroupedGemmArgs g;
          g.num_groups = E;
          g.n = p.n;
          g.k = kp;
          g.offsets = doff.as<int>();
          g.a = a[i % copies].p;
          g.b = w[i % copies].p;
          g.d = d.p;
          g.a_scale = sa.as<float>();
          g.b_scale = sb.as<float>();
          g.workspace = ws.p;
          g.workspace_bytes = wsb;
          if (fp8)
            grouped_gemm_fp8_blockwise(g, s, v.config);
          else
            grouped_gemm_bf16(g, s);
        });
        const double flops = 2.0 * M * p.n * p.k;  // useful FLOPs (k unpadded)
        const double bytes = double(size_t(active) * p.n * kp * eb + abytes + size_t(M) * p.n * 2);
        const bool bw_bound = T <= 64;
        report(name, "E32 rows" + std::to_string(M) + " n" + std::to_string(p.n) + " k" + std::to_string(kp),
               us, bw_bound ? 0 : flops, bytes, bw_bound ? 0 : (fp8 ? kFp8Tflops : kBf16Tflops));
      }
    }
  }
}

// moe_route's outputs and scratch for T tokens, E experts and top-k K.
struct RoutingBufs {
  Buf idx, w, off, rt, re, sr, act, nact, scratch;
  RoutingBufs(int T, int E, int K)
      : idx(size_t(T) * K * 4, Fill::kBytes, 0),
        w(size_t(T) * K * 4, Fill::kBytes, 0),
        off(size_t(E + 2) * 4, Fill::kBytes, 0),
        rt(size_t(T) * K * 4, Fill::kBytes, 0),
        re(size_t(T) * K * 4, Fill::kBytes, 0),
        sr(size_t(T) * K * 4, Fill::kBytes, 0),
        act(size_t(E) * 4, Fill::kBytes, 0),
        nact(4, Fill::kBytes, 0),
        scratch(moe_permute_scratch_bytes(T, E, K), Fill::kBytes, 0) {}
  MoeRouting routing() {
    return MoeRouting{off.as<int>(), rt.as<int>(), re.as<int>(), sr.as<int>(), act.as<int>(), nact.as<int>()};
  }
};

// Routing buffers filled by the real routing kernels from random logits.
struct Routed {
  Buf logits;
  RoutingBufs b;
  MoeRouting r;
  Routed(int T, int E, int K, uint64_t seed)
      : logits(size_t(T) * E * 4, Fill::kScale, seed), b(T, E, K), r(b.routing()) {
    moe_topk_softmax(logits.as<float>(), T, E, K, b.idx.as<int>(), b.w.as<float>(), nullptr);
    moe_permute(b.idx.as<int>(), T, E, K, r, b.scratch.p, nullptr);
    ORCHID_CUDA_CHECK(cudaDeviceSynchronize());
  }
};

// ORCHID_MXFP4_WORD_ORDER=tiled: the MXFP4 kernels decode the blocks in mxfp4_word_order.h's order (the
// random blocks are valid codes either way, so only the decode's cost changes).
bool mxfp4_tiled_order() {
  static const bool tiled = [] {
    const char* v = std::getenv("ORCHID_MXFP4_WORD_ORDER");
    return v == nullptr || std::strcmp(v, "checkpoint") != 0;  // the runtime's default: tiled
  }();
  return tiled;
}

// Bytes of rows x k MXFP4 blocks as the kernels take them (repacked with the tiled order: padded groups).
size_t mxfp4_block_bytes(int64_t rows, int k) {
  return size_t(mxfp4_tiled_order() ? mxfp4_order::grouped_bytes(rows, k) : rows * k / 2);
}

// Routed tokens and enough copies of random MXFP4 experts [E, n, k] to read cold data every repetition.
struct Mxfp4Experts {
  Routed rt;
  int active = 0;
  size_t active_bytes = 0;
  int copies = 1;
  std::vector<Buf> blocks, scales, scale_max;  // scale_max: each copy's largest scale, as computed at load
  Mxfp4Experts(int T, int E, int K, int n, int k) : rt(T, E, K, 77 + T) {
    std::vector<int> off(E + 1);
    ORCHID_CUDA_CHECK(cudaMemcpy(off.data(), rt.b.off.p, (E + 1) * 4, cudaMemcpyDeviceToHost));
    for (int e = 0; e < E; ++e) active += off[e + 1] > off[e];
    active_bytes = size_t(active) * n * (k / 2 + k / 32);
    copies = copies_for(active_bytes);
    for (int i = 0; i < copies; ++i) {
      blocks.emplace_back(mxfp4_block_bytes(int64_t(E) * n, k), Fill::kBytes, 30 + i);
      scales.emplace_back(size_t(E) * n * k / 32, Fill::kE8m0, 300 + i);
      scale_max.emplace_back(4, Fill::kBytes, 0);
      mxfp4_scale_max(scales.back().as<uint8_t>(), int64_t(E) * n * k / 32, scale_max.back().as<uint32_t>(),
                      nullptr);
    }
  }
  const uint8_t* b(int i) const { return blocks[size_t(i % copies)].as<uint8_t>(); }
  const uint8_t* s(int i) const { return scales[size_t(i % copies)].as<uint8_t>(); }
  // As the runtime passes it (ORCHID_MXFP4_SCALE_MAX=0: none, the A/B).
  const uint32_t* m(int i) const {
    static const bool on = [] {
      const char* v = std::getenv("ORCHID_MXFP4_SCALE_MAX");
      return v == nullptr || std::strcmp(v, "0") != 0;
    }();
    return on ? scale_max[size_t(i % copies)].as<uint32_t>() : nullptr;
  }
};

// ---------------------------------------------------------------- MXFP4 streaming GEMM
void bench_mxfp4(const Options& o, cudaStream_t s) {
  for (int E : {32, 128}) {
    for (int T : {1, 2, 4, 8, 16, 32, 64}) {
      for (int proj = 0; proj < 2; ++proj) {
        // Shapes named wWsSkK as before (S: the ring's chunks, kMxfp4StreamStages).
        for (auto [warps, ks] : {std::pair{0, 0}, {8, 1}, {8, 2}, {8, 4}, {8, 8}, {4, 1}, {4, 2}, {4, 4}}) {
          const int n = proj == 0 ? 5760 : 2880, k = 2880, K = 4;
          // warps 0: the kernel's own choice (mxfp4_stream_shape), named with what it chose.
          const Mxfp4StreamShape chosen = mxfp4_stream_shape(n, std::min(E, T * K));
          const std::string ring = "s" + std::to_string(kMxfp4StreamStages);
          const std::string shape = warps ? "w" + std::to_string(warps) + ring + "k" + std::to_string(ks)
                                          : "auto(w" + std::to_string(chosen.cta_warps) + ring + "k" +
                                                std::to_string(chosen.k_split) + ")";
          const std::string name = "mxfp4 stream " + shape + " " + (proj == 0 ? "gate_up" : "down") + " E" +
                                   std::to_string(E) + " T" + std::to_string(T);
          if (!want(o, name) || (o.quick && E == 128 && T > 1)) continue;
          const Mxfp4Experts ex(T, E, K, n, k);
          const MoeRouting& r = ex.rt.r;
          const int active = ex.active;
          const size_t active_bytes = ex.active_bytes;
          Buf x(size_t(T) * K * k * 2, Fill::kBf16, 9), y(size_t(T) * K * n * 2, Fill::kBytes, 0);
          const double us = median_us(s, 5, o.quick ? 20 : 50, [&](int i) {
            Mxfp4GemmArgs a;
            a.num_experts = E;
            a.n = n;
            a.k = k;
            a.offsets = r.offsets;
            a.active = r.active;
            a.num_active = r.num_active;
            a.max_active = std::min(E, T * K);
            a.max_rows_per_expert = T;
            a.blocks = ex.b(i);
            a.tiled_order = mxfp4_tiled_order();
            a.scales = ex.s(i);
            a.scale_max = ex.m(i);
            a.x = x.p;
            a.x_rows = proj == 0 ? r.row_token : nullptr;
            a.y = y.p;
            a.cta_warps = warps;
            a.k_split = ks;
            mxfp4_moe_gemm(a, s);
          });
          report(name, std::to_string(active) + " experts n" + std::to_string(n) + " k" + std::to_string(k),
                 us, 0, double(active_bytes + size_t(T) * K * (k + n) * 2), 0);
        }
      }
    }
  }
}

// ---------------------------------------------------------------- MXFP4 tiled GEMM
// Each tile size on the gpt-oss projections (gate_up with its fused SwiGLU epilogue, as the layer runs it),
// against the weight bytes of the experts used: the tables behind mxfp4_path's choices.
void bench_mxfp4_tiled(const Options& o, cudaStream_t s) {
  std::vector<int> token_counts = {16, 64, 128, 256, 512, 1024, 2048};
  if (o.quick) token_counts = {64, 256, 1024};
  struct ShapeCase {
    Mxfp4TiledShape shape;
    const char* label;
  };
  const ShapeCase shapes[] = {{Mxfp4TiledShape::kRows128, "r128"}, {Mxfp4TiledShape::kRows256, "r256"}};
  for (int E : {32, 128}) {
    for (int T : token_counts) {
      if (E == 128 && T != 256) continue;
      for (int proj = 0; proj < 2; ++proj) {
        for (const ShapeCase& sc0 : shapes) {
          for (int tt : kMxfp4TileTokens) {
            if ((tt >= 48 && T < 128) || (tt == 16 && T >= 512)) continue;
            if (sc0.shape == Mxfp4TiledShape::kRows256 && tt >= 64) continue;  // not instantiated
            const int n = proj == 0 ? 5760 : 2880, k = 2880, K = 4, M = T * K;
            const std::string name = std::string("mxfp4 tiled ") + sc0.label + " t" + std::to_string(tt) +
                                     " " + (proj == 0 ? "gate_up" : "down") + " E" + std::to_string(E) +
                                     " T" + std::to_string(T);
            if (!want(o, name)) continue;
            const Mxfp4Experts ex(T, E, K, n, k);
            const MoeRouting& r = ex.rt.r;
            const int active = ex.active;
            const size_t active_bytes = ex.active_bytes;
            Buf xb(size_t(M) * k * 2, Fill::kBf16, 9), x16(size_t(M) * k * 2, Fill::kBytes, 0);
            Buf y(size_t(M) * n * 2, Fill::kBytes, 0), b1(size_t(E) * n * 2, Fill::kBf16, 3);
            mxfp4_tiled_activation(xb.p, M, k, x16.p, s);
            const int max_tiles = mxfp4_tiled_max_tiles(M, E, tt);
            Buf tiles(size_t(max_tiles) * 8, Fill::kBytes, 0);
            mxfp4_tiled_plan(r.offsets, E, tt, tiles.as<int>(), max_tiles, s);
            const double us = median_us(s, 3, o.quick ? 10 : 20, [&](int i) {
              Mxfp4TiledArgs a;
              a.cta_shape = sc0.shape;
              a.num_experts = E;
              a.n = n;
              a.k = k;
              a.tile_tokens = tt;
              a.offsets = r.offsets;
              a.tiles = tiles.as<int>();
              a.max_tiles = max_tiles;
              a.blocks = ex.b(i);
              a.tiled_order = mxfp4_tiled_order();
              a.scales = ex.s(i);
              a.x = x16.p;  // the permuted rows (the layer gathers them in mxfp4_tiled_activation)
              a.x_row_count = M;
              a.y = y.p;
              a.swiglu_bias = proj == 0 ? b1.p : nullptr;
              mxfp4_tiled_gemm(a, s);
            });
            const double bytes =
                double(active_bytes + size_t(M) * k * 2 + size_t(M) * n * (proj == 0 ? 1 : 2));
            report(name, std::to_string(active) + " experts n" + std::to_string(n), us, 0, bytes, 0);
          }
        }
      }
    }
  }
}

// ---------------------------------------------------------------- MXFP4 W4A8 GEMM
// Prefill-sized steps on FP8 tensor cores (gate_up with its SwiGLU epilogue writing e4m3 z, down writing
// bf16), against the FP8 ceiling; and the row quantizer that feeds gate_up. The conversion path it replaces
// is "convert mxfp4->fp8" plus the FP8 grouped GEMM ("grouped fp8").
void bench_mxfp4_w4a8(const Options& o, cudaStream_t s) {
  if (!mxfp4_tiled_order()) return;  // the W4A8 GEMM reads the repacked tiled order only
  for (int E : {32, 128}) {
    for (int T : {2048, 8192, 16384}) {
      if ((E == 128 && T != 8192) || (o.quick && T != 8192)) continue;
      const int K = 4, M = T * K, k = 2880;
      const std::string tail = " E" + std::to_string(E) + " T" + std::to_string(T);
      const std::string qname = "mxfp4 w4a8 row quant" + tail;
      for (int proj = 0; proj < 2; ++proj) {
        const int n = proj == 0 ? 5760 : 2880;
        const std::string name = std::string("mxfp4 w4a8 ") + (proj == 0 ? "gate_up" : "down") + tail;
        if (!want(o, name) && !(proj == 0 && want(o, qname))) continue;
        const Mxfp4Experts ex(T, E, K, n, k);
        const MoeRouting& r = ex.rt.r;
        Buf xb(size_t(M) * k * 2, Fill::kBf16, 9), xq(size_t(M) * k, Fill::kBytes, 0),
            xs(size_t(M) * 4, Fill::kBytes, 0);
        Buf y(size_t(M) * n * 2, Fill::kBytes, 0), b1(size_t(E) * n * 2, Fill::kBf16, 3);
        if (proj == 0 && want(o, qname)) {
          const double us = median_us(s, 3, 20, [&](int) {
            mxfp4_w4a8_activation(xb.p, M, k, xq.as<uint8_t>(), xs.as<float>(), s, r.row_token);
          });
          report(qname, "rows " + std::to_string(M) + " k" + std::to_string(k), us, 0,
                 double(size_t(M) * k * 3), 0);
        }
        mxfp4_w4a8_activation(xb.p, M, k, xq.as<uint8_t>(), xs.as<float>(), s, r.row_token);
        if (!want(o, name)) continue;
        const int max_tiles = mxfp4_tiled_max_tiles(M, E, kMxfp4W4a8TileTokens);
        Buf tiles(size_t(max_tiles) * 8, Fill::kBytes, 0);
        mxfp4_tiled_plan(r.offsets, E, kMxfp4W4a8TileTokens, tiles.as<int>(), max_tiles, s);
        // The persistent grid (one CTA an SM, the default) and one CTA a work item.
        for (const int ctas : {0, 1 << 20}) {
          const double us = median_us(s, 3, o.quick ? 10 : 20, [&](int i) {
            Mxfp4W4a8Args a;
            a.num_experts = E;
            a.n = n;
            a.k = k;
            a.offsets = r.offsets;
            a.tiles = tiles.as<int>();
            a.max_tiles = max_tiles;
            a.blocks = ex.b(i);
            a.scales = ex.s(i);
            a.x = xq.as<uint8_t>();
            a.x_row_count = M;
            a.x_scale = xs.as<float>();
            a.y = y.p;
            a.max_ctas = ctas;
            if (proj == 0) {
              a.swiglu_bias = b1.p;
              a.z_scale = mxfp4_w4a8_z_scale(a.swiglu);
            }
            mxfp4_w4a8_gemm(a, s);
          });
          report(name + (ctas ? " per-item" : ""), std::to_string(ex.active) + " experts " + shape3(M, n, k),
                 us, 2.0 * M * n * k, 0, kFp8Tflops);
        }
      }
    }
  }
}

// ---------------------------------------------------------------- conversions
void bench_convert(const Options& o, cudaStream_t s) {
  const int E = 32, n = 5760, k = 2880, kp = round_up_128(k);
  const size_t bbytes = mxfp4_block_bytes(int64_t(E) * n, k), sbytes = size_t(E) * n * k / 32;
  // One CTA per 128 x 128 block, and the persistent grid whose CTAs load their next block while converting.
  for (const auto& [label, grid] :
       {std::pair{"convert mxfp4->fp8 gate_up layer", Fp8ConvertGrid::kOneCtaPerBlock},
        std::pair{"convert mxfp4->fp8 gate_up layer persistent", Fp8ConvertGrid::kPersistent}}) {
    if (!want(o, label)) continue;
    Buf bl(bbytes, Fill::kBytes, 1), sc(sbytes, Fill::kE8m0, 2);
    Buf q(size_t(E) * n * kp, Fill::kBytes, 0), qs(size_t(E) * (n / 128) * (kp / 128) * 4, Fill::kBytes, 0);
    const double us = median_us(s, 2, o.quick ? 5 : 10, [&](int) {
      mxfp4_to_fp8_block(bl.as<uint8_t>(), sc.as<uint8_t>(), E, n, k, Fp8ScaleRule::kPow2, q.as<uint8_t>(),
                         qs.as<float>(), nullptr, s, mxfp4_tiled_order(), grid);
    });
    report(label, "E32 n5760 k2880", us, 0, double(bbytes + sbytes + q.bytes), 0);
  }
  if (want(o, "convert mxfp4->bf16 gate_up layer")) {
    Buf bl(bbytes, Fill::kBytes, 1), sc(sbytes, Fill::kE8m0, 2), out(size_t(E) * n * k * 2, Fill::kBytes, 0);
    const double us = median_us(s, 2, o.quick ? 5 : 10, [&](int) {
      mxfp4_to_bf16(bl.as<uint8_t>(), sc.as<uint8_t>(), E, n, k, out.p, s);
    });
    report("convert mxfp4->bf16 gate_up layer", "E32 n5760 k2880", us, 0, double(bbytes + sbytes + out.bytes),
           0);
  }
}

// ---------------------------------------------------------------- the conversion beside the FP8 GEMM
// Could the next layer's MXFP4 -> FP8 conversion (memory-bound) run under this layer's FP8 grouped GEMM
// (compute-bound at prefill sizes) if each had SMs of its own? 20b's gate_up at 8192 tokens and a gate_up
// conversion (E32 n5760 k2880): each alone on every SM, each alone on its share, and both from two streams
// in either launch order, for a few conversion SM counts. What it answers: the bandwidth the persistent
// conversion draws from c SMs, and whether the block scheduler keeps the two grids apart.
void bench_overlap(const Options& o, cudaStream_t s) {
  if (!want(o, "overlap")) return;
  const int E = 32, T = 8192, K = 4, M = T * K, n = 5760, k = 2880, kp = round_up_128(k);
  int sms = 0;
  ORCHID_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const auto off = uniform_offsets(T, E, K, 77);
  Buf w(size_t(E) * n * kp, Fill::kFp8, 21), a(size_t(M) * kp, Fill::kFp8, 22);
  Buf sa(size_t(M) * (kp / 128) * 4, Fill::kScale, 3),
      sb(size_t(E) * ((n + 127) / 128) * (kp / 128) * 4, Fill::kScale, 4);
  Buf d(size_t(M) * n * 2, Fill::kBytes, 5), doff((E + 1) * 4, Fill::kBytes, 0);
  ORCHID_CUDA_CHECK(cudaMemcpy(doff.p, off.data(), (E + 1) * 4, cudaMemcpyHostToDevice));
  const size_t wsb = grouped_gemm_fp8_workspace_bytes(E);
  Buf ws(wsb, Fill::kBytes, 0);
  const size_t bbytes = mxfp4_block_bytes(int64_t(E) * n, k), sbytes = size_t(E) * n * k / 32;
  Buf bl(bbytes, Fill::kBytes, 1), sc(sbytes, Fill::kE8m0, 2);
  Buf q(size_t(E) * n * kp, Fill::kBytes, 0), qs(size_t(E) * (n / 128) * (kp / 128) * 4, Fill::kBytes, 0);
  auto gemm = [&](cudaStream_t st, int on_sms) {
    GroupedGemmArgs g;
    g.num_groups = E;
    g.n = n;
    g.k = kp;
    g.offsets = doff.as<int>();
    g.a = a.p;
    g.b = w.p;
    g.d = d.p;
    g.a_scale = sa.as<float>();
    g.b_scale = sb.as<float>();
    g.workspace = ws.p;
    g.workspace_bytes = wsb;
    g.max_sms = on_sms;
    grouped_gemm_fp8_blockwise(g, st);
  };
  auto convert = [&](cudaStream_t st, int on_sms) {
    mxfp4_to_fp8_block(bl.as<uint8_t>(), sc.as<uint8_t>(), E, n, k, Fp8ScaleRule::kPow2, q.as<uint8_t>(),
                       qs.as<float>(), nullptr, st, false, Fp8ConvertGrid::kPersistent, on_sms);
  };
  cudaStream_t side;
  cudaEvent_t fork, join;
  ORCHID_CUDA_CHECK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
  ORCHID_CUDA_CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  ORCHID_CUDA_CHECK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
  const int reps = o.quick ? 5 : 10;
  const double flops = 2.0 * M * n * k, conv_bytes = double(bbytes + sbytes + q.bytes);
  const std::string shape = "T8192 E32 n5760 k2880";
  const double g_all = median_us(s, 2, reps, [&](int) { gemm(s, 0); });
  report("overlap gemm alone", shape, g_all, flops, 0, kFp8Tflops);
  const double c_all = median_us(s, 2, reps, [&](int) { convert(s, 0); });
  report("overlap convert alone", shape, c_all, 0, conv_bytes, 0);
  std::printf("overlap: one after the other %.1f us; the conversion keeps %d CTAs an SM\n", g_all + c_all,
              mxfp4_to_fp8_ctas_per_sm());
  for (int c : {4, 8, 16, 32}) {
    const std::string tag = " c" + std::to_string(c);
    report("overlap gemm on the rest" + tag, shape, median_us(s, 2, reps, [&](int) { gemm(s, sms - c); }),
           flops, 0, kFp8Tflops);
    report("overlap convert alone" + tag, shape, median_us(s, 2, reps, [&](int) { convert(s, c); }), 0,
           conv_bytes, 0);
    for (bool convert_first : {false, true}) {
      const double us = median_us(s, 2, reps, [&](int) {
        ORCHID_CUDA_CHECK(cudaEventRecord(fork, s));
        ORCHID_CUDA_CHECK(cudaStreamWaitEvent(side, fork, 0));
        if (convert_first) convert(side, c);
        gemm(s, sms - c);
        if (!convert_first) convert(side, c);
        ORCHID_CUDA_CHECK(cudaEventRecord(join, side));
        ORCHID_CUDA_CHECK(cudaStreamWaitEvent(s, join, 0));
      });
      report(std::string("overlap both") + tag + (convert_first ? " convert first" : " gemm first"), shape,
             us, flops, 0, kFp8Tflops);
    }
  }
  cudaEventDestroy(fork);
  cudaEventDestroy(join);
  cudaStreamDestroy(side);
}

// ---------------------------------------------------------------- whole MoE layer
// The layer as the runtime runs it ("mxfp4": mxfp4_path's choice), and each MXFP4 path forced, so the
// crossovers can be read off one table.
void bench_layer(const Options& o, cudaStream_t s, DenseGemm& router_gemm) {
  struct Variant {
    MoeWeights format;
    const char* label;
    int stream_max, tiled_max, max_t;  // forced MXFP4 path bounds (-1: defaults); largest T run
  };
  constexpr int kAll = 1 << 20;
  const Variant variants[] = {{MoeWeights::kMxfp4, "mxfp4", -1, -1, kAll},
                              {MoeWeights::kMxfp4, "mxfp4-stream", kAll, kAll, 256},
                              {MoeWeights::kMxfp4, "mxfp4-tiled", 0, kAll, 8192},
                              {MoeWeights::kMxfp4, "mxfp4-via-fp8", 0, 0, kAll},
                              {MoeWeights::kFp8, "fp8", -1, -1, kAll},
                              {MoeWeights::kBf16, "bf16", -1, -1, kAll}};
  std::vector<int> token_counts = {1, 2, 4, 8, 32, 64, 128, 256, 512, 1024, 2048, 8192};
  if (o.quick) token_counts = {1, 64, 256, 1024, 8192};
  if (!o.quick) token_counts.push_back(32768);
  for (const Variant& v : variants) {
    for (int T : token_counts) {
      const std::string name = std::string("moe layer ") + v.label + " T" + std::to_string(T);
      if (!want(o, name) || T > v.max_t) continue;
      const int f = v.format == MoeWeights::kMxfp4 ? 0 : v.format == MoeWeights::kFp8 ? 1 : 2;
      const MoeWeights formats[] = {MoeWeights::kMxfp4, MoeWeights::kFp8, MoeWeights::kBf16};
      MoeConfig cfg;
      cfg.weights = v.format;
      cfg.max_tokens = T;
      cfg.mxfp4_stream_max_tokens = v.stream_max;
      cfg.mxfp4_tiled_max_tokens = v.tiled_max;
      cfg.mxfp4_tiled_order = mxfp4_tiled_order();
      const int E = cfg.experts, H = cfg.hidden, I = cfg.inter, Hp = round_up_128(H), Ip = round_up_128(I);
      size_t w1b, w1s, w2b, w2s;
      Fill wf = Fill::kBytes, sf = Fill::kE8m0;
      if (formats[f] == MoeWeights::kMxfp4) {
        w1b = mxfp4_block_bytes(int64_t(E) * 2 * I, H), w1s = size_t(E) * 2 * I * H / 32,
        w2b = mxfp4_block_bytes(int64_t(E) * H, I), w2s = size_t(E) * H * I / 32;
      } else if (formats[f] == MoeWeights::kFp8) {
        w1b = size_t(E) * 2 * I * Hp, w1s = size_t(E) * (2 * I / 128) * (Hp / 128) * 4,
        w2b = size_t(E) * H * Ip, w2s = size_t(E) * ((H + 127) / 128) * (Ip / 128) * 4;
        wf = Fill::kFp8;
        sf = Fill::kScale;
      } else {
        w1b = size_t(E) * 2 * I * H * 2, w1s = 0, w2b = size_t(E) * H * I * 2, w2s = 0;
        wf = Fill::kBf16;
      }
      const int copies = copies_for(T <= 8 ? (w1b + w2b) / 8 : w1b + w2b);  // T = 1 touches 4/32 experts
      std::vector<Buf> w1, s1, w2, s2, m12;  // m12: the MXFP4 copies' largest scales, as computed at load
      for (int i = 0; i < copies; ++i) {
        w1.emplace_back(w1b, wf, 40 + i);
        s1.emplace_back(w1s, sf, 400 + i);
        w2.emplace_back(w2b, wf, 50 + i);
        s2.emplace_back(w2s, sf, 500 + i);
        m12.emplace_back(8, Fill::kBytes, 0);
        if (formats[f] == MoeWeights::kMxfp4) {
          mxfp4_scale_max(s1.back().as<uint8_t>(), int64_t(w1s), m12.back().as<uint32_t>(), nullptr);
          mxfp4_scale_max(s2.back().as<uint8_t>(), int64_t(w2s), m12.back().as<uint32_t>() + 1, nullptr);
        }
      }
      Buf rw(size_t(E) * H * 2, Fill::kBf16, 1), rb(size_t(E) * 4, Fill::kScale, 2),
          b1(size_t(E) * 2 * I * 2, Fill::kBf16, 3), b2(size_t(E) * H * 2, Fill::kBf16, 4),
          h(size_t(T) * H * 2, Fill::kBf16, 5), x(size_t(T) * H * 4, Fill::kScale, 6);
      Buf ws(moe_workspace_bytes(cfg), Fill::kBytes, 0);
      moe_workspace_init(cfg, ws.p, s);
      auto weights = [&](int i) {
        MoeLayerWeights lw;
        lw.router_w = rw.p;
        lw.router_b = rb.as<float>();
        lw.w1 = w1[i % copies].p;
        lw.w1_scale = s1[i % copies].p;
        lw.w2 = w2[i % copies].p;
        lw.w2_scale = s2[i % copies].p;
        if (formats[f] == MoeWeights::kMxfp4) {
          lw.w1_scale_max = m12[i % copies].as<uint32_t>();
          lw.w2_scale_max = lw.w1_scale_max + 1;
        }
        lw.b1 = b1.p;
        lw.b2 = b2.p;
        return lw;
      };
      double us;
      if (T <= 256) {  // decode: as the runtime runs it, one CUDA graph per step
        moe_forward(cfg, weights(0), h.p, x.as<float>(), T, router_gemm, ws.p, s);  // plans, attributes
        ORCHID_CUDA_CHECK(cudaStreamSynchronize(s));
        std::vector<cudaGraphExec_t> execs(copies);
        for (int i = 0; i < copies; ++i) {
          cudaGraph_t g;
          ORCHID_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
          moe_forward(cfg, weights(i), h.p, x.as<float>(), T, router_gemm, ws.p, s);
          ORCHID_CUDA_CHECK(cudaStreamEndCapture(s, &g));
          ORCHID_CUDA_CHECK(cudaGraphInstantiate(&execs[i], g, 0));
          cudaGraphDestroy(g);
        }
        us = median_us(s, 5, o.quick ? 20 : 50,
                       [&](int i) { ORCHID_CUDA_CHECK(cudaGraphLaunch(execs[i % copies], s)); });
        for (auto e : execs) cudaGraphExecDestroy(e);
      } else {
        us = median_us(s, 2, o.quick ? 5 : 10, [&](int i) {
          moe_forward(cfg, weights(i), h.p, x.as<float>(), T, router_gemm, ws.p, s);
        });
      }
      const double flops = 2.0 * T * cfg.top_k * (2.0 * I * H + double(H) * I) + 2.0 * T * E * H;
      // the weights' own bytes (the repacked blocks' padding is not counted)
      const double per_expert =
          formats[f] == MoeWeights::kMxfp4 ? double(H) * I * 3 * 17 / 32 : double(w1b + w1s + w2b + w2s) / E;
      const double active = std::min<double>(E, T * cfg.top_k);  // upper bound on experts touched
      const bool bw_bound = T <= 256;
      report(name, "E32 H2880 I2880 top4", us, bw_bound ? 0 : flops, per_expert * active,
             bw_bound ? 0 : (formats[f] == MoeWeights::kBf16 ? kBf16Tflops : kFp8Tflops));
    }
  }
}

// A chain of kernels captured kChainReps times back to back in one CUDA graph, as a step runs them: µs of a
// graph launch over kChainReps (the chain's latency, launches in). One run first, outside the capture, for
// first-use choices and attributes.
constexpr int kChainReps = 32;
double chain_us(const Options& o, cudaStream_t s, const std::function<void()>& chain) {
  chain();
  ORCHID_CUDA_CHECK(cudaStreamSynchronize(s));
  cudaGraph_t g;
  cudaGraphExec_t exec;
  ORCHID_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < kChainReps; ++i) chain();
  ORCHID_CUDA_CHECK(cudaStreamEndCapture(s, &g));
  ORCHID_CUDA_CHECK(cudaGraphInstantiate(&exec, g, 0));
  cudaGraphDestroy(g);
  const double us =
      median_us(s, 3, o.quick ? 10 : 30, [&](int) { ORCHID_CUDA_CHECK(cudaGraphLaunch(exec, s)); }) /
      kChainReps;
  cudaGraphExecDestroy(exec);
  return us;
}

// "BASE kernels" (the chain of kernels a step runs) and "BASE fused" (the one launch replacing them), each
// timed by chain_us, as the filter asks.
void report_kernels_and_fused(const Options& o, cudaStream_t s, const std::string& base,
                              const std::function<void()>& kernels, const std::function<void()>& fused,
                              const std::string& shape, double bytes) {
  for (int variant = 0; variant < 2; ++variant) {
    const std::string name = base + (variant == 0 ? " kernels" : " fused");
    if (!want(o, name)) continue;
    report(name, shape, chain_us(o, s, variant == 0 ? kernels : fused), 0, bytes, 0);
  }
}

// ---------------------------------------------------------------- post-attention norm + router + routing
// A decode step's chain from the O projection to the experts: the norm kernel, the router GEMM over the hi
// and lo rows and the routing, against moe_norm_route's one launch, each timed by chain_us.
void bench_norm_route(const Options& o, cudaStream_t s, DenseGemm& gemm) {
  for (int E : {32, 128}) {
    for (int T : {1, 2, 4, 8}) {
      const std::string base = "norm route E" + std::to_string(E) + " T" + std::to_string(T);
      if (!want(o, base + " kernels") && !want(o, base + " fused")) continue;
      const int H = 2880, K = 4;
      Buf x(size_t(T) * H * 4, Fill::kScale, 1), delta(size_t(T) * H * 2, Fill::kBf16, 2),
          gamma(size_t(H) * 4, Fill::kScale, 3), h(size_t(2) * T * H * 2, Fill::kBf16, 4),
          rw(size_t(E) * H * 2, Fill::kBf16, 5), rb(size_t(E) * 4, Fill::kScale, 6),
          logits(size_t(2) * T * E * 4, Fill::kBytes, 0);
      RoutingBufs bufs(T, E, K);
      Buf &idx = bufs.idx, &w = bufs.w, &scratch = bufs.scratch;
      const MoeRouting routing = bufs.routing();
      auto* hb = h.as<__nv_bfloat16>();
      auto kernels = [&] {
        norm::rmsnorm_residual_split(x.as<float>(), delta.as<__nv_bfloat16>(), gamma.as<float>(), hb,
                                     hb + size_t(T) * H, T, H, 1e-5f, s);
        DenseGemmArgs r;
        r.m = 2 * T;
        r.n = E;
        r.k = H;
        r.x = hb;
        r.w = rw.p;
        r.y = logits.p;
        r.out = GemmOut::kF32;
        gemm.run(r, s);
        moe_route(logits.as<float>(), T, E, K, idx.as<int>(), w.as<float>(), routing, scratch.p, s,
                  logits.as<float>() + size_t(T) * E, rb.as<float>());
      };
      auto fused = [&] {
        NormRouteArgs a;
        a.residual = x.as<float>();
        a.delta = delta.as<__nv_bfloat16>();
        a.gamma = gamma.as<float>();
        a.eps = 1e-5f;
        a.out = hb;
        a.router_w = rw.as<__nv_bfloat16>();
        a.router_b = rb.as<float>();
        a.logits = logits.as<float>();
        a.topk_idx = idx.as<int>();
        a.topk_w = w.as<float>();
        a.routing = routing;
        a.num_tokens = T;
        a.hidden = H;
        a.num_experts = E;
        a.top_k = K;
        moe_norm_route(a, s);
      };
      report_kernels_and_fused(o, s, base, kernels, fused, "H2880 top4 (a chain of 32)",
                               double(E) * H * 2 + double(T) * H * 10);
    }
  }
}

// ---------------------------------------------------------------- router + routing
// A step's router and routing above the fused norm kernel's tokens: the router GEMM over the hi and lo rows
// and moe_route (two to five launches) against moe_router_route's one, each timed by chain_us.
void bench_router_route(const Options& o, cudaStream_t s, DenseGemm& gemm) {
  for (int E : {32, 128}) {
    for (int T : {4, 16, 64, 128, 256}) {
      const std::string base = "router route E" + std::to_string(E) + " T" + std::to_string(T);
      if (!want(o, base + " kernels") && !want(o, base + " fused") && !want(o, base + " norm kernels") &&
          !want(o, base + " norm fused"))
        continue;
      const int H = 2880, K = 4;
      Buf h(size_t(2) * T * H * 2, Fill::kBf16, 4), rw(size_t(E) * H * 2, Fill::kBf16, 5),
          rb(size_t(E) * 4, Fill::kScale, 6), logits(size_t(2) * T * E * 4, Fill::kBytes, 0),
          rscratch(router_route_scratch_bytes(T, E), Fill::kBytes, 0);
      router_route_scratch_init(rscratch.p, s);
      RoutingBufs bufs(T, E, K);
      Buf &idx = bufs.idx, &w = bufs.w, &scratch = bufs.scratch;
      const MoeRouting routing = bufs.routing();
      auto kernels = [&] {
        DenseGemmArgs r;
        r.m = 2 * T;
        r.n = E;
        r.k = H;
        r.x = h.p;
        r.w = rw.p;
        r.y = logits.p;
        r.out = GemmOut::kF32;
        gemm.run(r, s);
        moe_route(logits.as<float>(), T, E, K, idx.as<int>(), w.as<float>(), routing, scratch.p, s,
                  logits.as<float>() + size_t(T) * E, rb.as<float>());
      };
      RouterRouteArgs args;
      args.x = h.as<__nv_bfloat16>();
      args.split = true;
      args.router_w = rw.as<__nv_bfloat16>();
      args.router_b = rb.as<float>();
      args.logits = logits.as<float>();
      args.topk_idx = idx.as<int>();
      args.topk_w = w.as<float>();
      args.routing = routing;
      args.scratch = rscratch.p;
      args.num_tokens = T;
      args.hidden = H;
      args.num_experts = E;
      args.top_k = K;
      auto fused = [&] { moe_router_route(args, s); };
      report_kernels_and_fused(o, s, base, kernels, fused, "split H2880 top4 (a chain of 32)",
                               double(E) * H * 2 + double(T) * H * 4);
      // With the block's input norm: the norm kernel first, or in the fused launch (ORCHID_ROUTER_ROUTE=2).
      Buf res(size_t(T) * H * 4, Fill::kScale, 1), delta(size_t(T) * H * 2, Fill::kBf16, 2),
          gamma(size_t(H) * 4, Fill::kScale, 3);
      auto* hb = h.as<__nv_bfloat16>();
      auto norm_kernels = [&] {
        norm::rmsnorm_residual_split(res.as<float>(), delta.as<__nv_bfloat16>(), gamma.as<float>(), hb,
                                     hb + size_t(T) * H, T, H, 1e-5f, s);
        kernels();
      };
      RouterRouteArgs norm_args = args;
      norm_args.x = nullptr;
      norm_args.residual = res.as<float>();
      norm_args.delta = delta.as<__nv_bfloat16>();
      norm_args.gamma = gamma.as<float>();
      norm_args.out = hb;
      auto norm_fused = [&] { moe_router_route(norm_args, s); };
      report_kernels_and_fused(o, s, base + " norm", norm_kernels, norm_fused,
                               "split H2880 top4 (a chain of 32)", double(E) * H * 2 + double(T) * H * 10);
    }
  }
}

// ---------------------------------------------------------------- routing
// moe_route as a step calls it (one CTA up to moe_route_fused_max_items() items, else four kernels) against
// the four kernels, on the same logits, each timed by chain_us.
void bench_route(const Options& o, cudaStream_t s) {
  for (int E : {32, 128}) {
    for (int T : {8, 16, 32, 64, 128, 256}) {
      const std::string base = "route E" + std::to_string(E) + " T" + std::to_string(T);
      const int K = 4;
      const bool fused = T * K <= moe_route_fused_max_items();
      if (!want(o, base + " fused") && !want(o, base + " general")) continue;
      Buf logits(size_t(T) * E * 4, Fill::kScale, 7);
      RoutingBufs bufs(T, E, K);
      Buf &idx = bufs.idx, &w = bufs.w, &scratch = bufs.scratch;
      const MoeRouting routing = bufs.routing();
      auto route = [&] {
        moe_route(logits.as<float>(), T, E, K, idx.as<int>(), w.as<float>(), routing, scratch.p, s);
      };
      auto general = [&] {
        moe_topk_softmax(logits.as<float>(), T, E, K, idx.as<int>(), w.as<float>(), s);
        moe_permute(idx.as<int>(), T, E, K, routing, scratch.p, s);
      };
      for (int variant = fused ? 0 : 1; variant < 2; ++variant) {
        const std::string name = base + (variant == 0 ? " fused" : " general");
        if (!want(o, name)) continue;
        const double us = chain_us(o, s, variant == 0 ? std::function<void()>(route) : general);
        report(name, "top4 (a chain of 32)", us, 0, double(T) * E * 4, 0);
      }
    }
  }
}
}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--quick"))
      o.quick = true;
    else if (!std::strcmp(argv[i], "--filter") && i + 1 < argc)
      o.filter = argv[++i];
    else if (!std::strcmp(argv[i], "--tag") && i + 1 < argc)
      o.tag = argv[++i];
    else {
      std::fprintf(stderr, "usage: %s [--quick] [--filter SUBSTRING] [--tag TEXT]\n", argv[0]);
      return 2;
    }
  }
  try {
    cudaDeviceProp p{};
    ORCHID_CUDA_CHECK(cudaGetDeviceProperties(&p, 0));
    std::printf("moe_bench: %s, %d SMs, L2 %d MB %s%s\n", p.name, p.multiProcessorCount, p.l2CacheSize >> 20,
                o.tag.empty() ? "" : "tag ", o.tag.c_str());
    cudaStream_t s;
    ORCHID_CUDA_CHECK(cudaStreamCreate(&s));
    void* gws = nullptr;
    ORCHID_CUDA_CHECK(cudaMalloc(&gws, DenseGemm::kRecommendedWorkspace));
    DenseGemm gemm(gws, DenseGemm::kRecommendedWorkspace);
    bench_dense(o, s, gemm);
    bench_grouped(o, s);
    bench_mxfp4(o, s);
    bench_mxfp4_tiled(o, s);
    bench_mxfp4_w4a8(o, s);
    bench_convert(o, s);
    bench_overlap(o, s);
    bench_layer(o, s, gemm);
    bench_norm_route(o, s, gemm);
    bench_router_route(o, s, gemm);
    bench_route(o, s);
    std::printf(
        "\n==== moe_bench summary (median; %% of 742 TFLOP/s BF16, 1332 TFLOP/s FP8, 4.17 TB/s HBM) ====\n");
    std::printf("%-34s %-30s %10s %10s %8s\n", "case", "shape", "time_us", "achieved", "%ceil");
    for (const Row& r : g_rows)
      std::printf("%-34s %-30s %10.1f %7.2f %-2s %7.1f%%\n", r.name.c_str(), r.shape.c_str(), r.us, r.value,
                  r.unit[1] == 'F' ? "TF" : "TB", 100.0 * r.value / r.ceiling);
    cudaFree(gws);
    cudaStreamDestroy(s);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "moe_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
