// The residual RMSNorm, the router and the routing of a small batch in one cluster launch (norm_route.h).
//
// Napkin math, gpt-oss-20b at one token: the router row of an expert is 5.8 KB (184 KB for 32), the residual
// and delta rows 17 KB; a few hundred nanoseconds of arithmetic. What the three kernels it replaces cost (a
// decode step at batch 1 on an H100: 5.5 + 4.1 + 5.8 us a layer) is launch and dependency latency, so this
// kernel loads its constants before it waits for the O projection and keeps every phase on chip. Inside it,
// time goes to barriers and to instructions fetched cold (a step runs ~15 other kernels between two of its
// launches), so the phases are few, their loops are sized at compile time for 1 and 2 tokens, and only block
// 0 waits for the others.
//
// Phases (block r of a cluster of C; W warps of which the first per_block score one expert each):
//   1. router rows into registers and gamma into shared memory (constants: before the dependency wait);
//      pdl_wait
//   2. the residual and delta rows into shared memory by two bulk copies; v = residual + delta and each row's
//      sum of squares in one pass, in rmsnorm_row.cuh's order (virtual threads of the norm kernel's block
//      size), so r = rsqrt(...) has its bits
//   3. y = (v * r) * gamma (bf16-rounded unless precise); block r writes its share of out = bf16(y). In
//      shared memory y is [T][2][H / 8] float4: elements 0-3 of every 8, then 4-7, so that the phase-4 reads
//      (lane l: chunk l + 32 j) are consecutive 16-byte words, free of bank conflicts
//   4. logits of the block's experts -> block 0's shared memory by st.async, counted on block 0's mbarrier;
//      every block but 0 is done
//   5. block 0, once every logit has landed: the residual (v) written, top-k by ranks, the permutation
//      (routing_device.cuh)
// Every block reads the residual in phase 2 and sends its logits after that, so block 0 writes it only once
// every block has read it.
// Shared memory: (2 * T + 1) * H * 4 bytes (191 KB at 8 tokens of 2880; norm_route_fits bounds it) beside
// ~26 KB of fixed arrays. Every warp reads all T rows of y for its expert, so the kernel grows with T
// (moe_layer.cu takes it at 1-2 tokens).
#include "kernels/moe/norm_route.h"

#include <cooperative_groups.h>

#include <algorithm>
#include <cstdlib>

#include "kernels/common/bulk_copy.cuh"
#include "kernels/common/cuda_check.h"
#include "kernels/common/pdl.cuh"
#include "kernels/common/quant.cuh"
#include "kernels/common/smem_attribute.h"
#include "kernels/moe/routing_device.cuh"
#include "kernels/norm/rmsnorm_row.cuh"

namespace orchid::kernels {
namespace {

namespace cg = cooperative_groups;
using namespace routing_detail;

constexpr int kMaxCluster = 8;
constexpr int kMaxWarps = 16;
constexpr int kMaxExperts = 128;
constexpr int kWChunks = 12;  // 16-byte pieces of a router row per lane: hidden <= 32 * 12 * 8 = 3072
constexpr int kMaxHidden = 32 * kWChunks * 8;
// Dynamic shared memory, (2 * T + 1) * H floats: at most what leaves ~32 KB of the SM's 227 for the fixed
// arrays (8 tokens of 2880 fit; 8 of 3072 do not).
constexpr int kMaxDynamicBytes = (227 - 32) * 1024;

size_t dynamic_bytes(int num_tokens, int hidden) {
  return (2 * size_t(num_tokens) + 1) * size_t(hidden) * 4;
}
constexpr int kMaxRowWarps = 32;  // warps of the norm kernel's row block (rmsnorm_row.cuh)

struct Params {
  NormRouteArgs a;
  KeyMap km;
  int num_keys;
  int per_block;    // experts a block scores
  int row_threads;  // the norm kernel's block size for this hidden size
  bool trigger;     // let the next kernel launch once the logits are in
};

__device__ __forceinline__ void cluster_arrive_relaxed() {
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() {
  asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");
}

// A 4-byte store into block `rank`'s shared memory (the same offset as `local` here), counted as 4 bytes
// of the phase of that block's mbarrier `bar` (also given by its local address).
__device__ __forceinline__ void st_async_remote(const float* local, float value, const uint64_t* bar,
                                                unsigned rank) {
  uint32_t dst, rbar;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(dst) : "r"(smem_addr(local)), "r"(rank));
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(rbar) : "r"(smem_addr(bar)), "r"(rank));
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];\n" ::"r"(dst),
               "r"(__float_as_uint(value)), "r"(rbar)
               : "memory");
}

// kTokens: the batch when it is 1 or 2 (compile-time loops: the code a step runs is what it fetches), else
// kNormRouteMaxTokens with the batch read at run time.
template <int kTokens>
__global__ void __launch_bounds__(kMaxWarps * 32) norm_route_kernel(Params p) {
  constexpr bool kExact = kTokens < kNormRouteMaxTokens;
  const NormRouteArgs& a = p.a;
  const int T = kExact ? kTokens : a.num_tokens;
  const int H = a.hidden, E = a.num_experts, chunks = H / 8;
  extern __shared__ __align__(128) float smem[];
  float* v = smem;                   // [T][H]: the residual, then residual + delta
  float* y = smem + size_t(T) * H;   // the delta rows (bf16 [T][H]), then the norm output (phase 3's layout)
  float* g = y + size_t(T) * H;      // [H]: gamma
  __shared__ uint64_t s_bar;         // the bulk copies
  __shared__ uint64_t s_logits_bar;  // block 0: every block's logits
  __shared__ __align__(16) float s_logits[kNormRouteMaxTokens * kMaxExperts];
  __shared__ float s_wsum[kNormRouteMaxTokens][kMaxRowWarps];
  __shared__ float s_sel[kNormRouteMaxTokens * kMoeMaxTopK];
  __shared__ int s_idx[kNormRouteMaxTokens * kMoeMaxTopK];
  __shared__ PermuteSmem<kMaxWarps> psm;
  cg::cluster_group cluster = cg::this_cluster();
  const unsigned rank = cluster.block_rank(), csize = cluster.num_blocks();
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, warps = int(blockDim.x) / 32;

  // 1. Constants, read before the wait (overlapping the O projection's tail): this warp's router row into
  //    registers, gamma into shared memory.
  const int expert = int(rank) * p.per_block + warp;
  const bool scorer = warp < p.per_block && expert < E;
  uint4 w[kWChunks];
#pragma unroll
  for (int j = 0; j < kWChunks; ++j) {
    const int idx = lane + 32 * j;
    w[j] = scorer && idx < chunks ? reinterpret_cast<const uint4*>(a.router_w + size_t(expert) * H)[idx]
                                  : make_uint4(0, 0, 0, 0);
  }
  const float bias = scorer ? a.router_b[expert] : 0.0f;
  const uint32_t x_bytes = uint32_t(T) * uint32_t(H) * 4, d_bytes = uint32_t(T) * uint32_t(H) * 2;
  if (tid == 0) {
    mbar_init(&s_bar, 1);
    mbar_init(&s_logits_bar, 1);
    mbar_init_fence();
    mbar_arrive_expect_tx(&s_bar, x_bytes + d_bytes + uint32_t(H) * 4);
    bulk_copy_g2s(g, a.gamma, uint32_t(H) * 4, &s_bar);
    if (rank == 0) mbar_arrive_expect_tx(&s_logits_bar, uint32_t(T) * uint32_t(E) * 4);
  }
  __syncthreads();
  cluster_arrive_relaxed();  // block 0's barrier is armed before any block sends it logits (phase 4)
  pdl_wait();

  // 2. The residual and delta rows by two bulk copies (every byte in flight at once); then v = residual +
  //    delta in place and each row's sum of squares, thread vt of warp q of the norm kernel's block taking
  //    its chunks in that kernel's order.
  if (tid == 0) {
    bulk_copy_g2s(v, a.residual, x_bytes, &s_bar);
    bulk_copy_g2s(y, a.delta, d_bytes, &s_bar);
  }
  mbar_wait(&s_bar, 0);
  const int row_warps = p.row_threads / 32;
  for (int pair = warp; pair < T * row_warps; pair += warps) {
    const int t = pair / row_warps, q = pair % row_warps, vt = 32 * q + lane;
    float ss = 0.0f;
#pragma unroll
    for (int c = 0; c < norm::detail::kMaxChunks; ++c) {
      const int idx = vt + c * p.row_threads;
      if (idx < chunks) {
        float d[8];
        bf16x8_to_float(reinterpret_cast<const uint4*>(y)[t * chunks + idx], d);
        float4* dst = reinterpret_cast<float4*>(v + size_t(t) * H) + 2 * idx;
        const float4 x0 = dst[0], x1 = dst[1];
        const float sv[8] = {__fadd_rn(x0.x, d[0]), __fadd_rn(x0.y, d[1]), __fadd_rn(x0.z, d[2]),
                             __fadd_rn(x0.w, d[3]), __fadd_rn(x1.x, d[4]), __fadd_rn(x1.y, d[5]),
                             __fadd_rn(x1.z, d[6]), __fadd_rn(x1.w, d[7])};
        dst[0] = make_float4(sv[0], sv[1], sv[2], sv[3]);
        dst[1] = make_float4(sv[4], sv[5], sv[6], sv[7]);
#pragma unroll
        for (int e = 0; e < 8; ++e) ss = fmaf(sv[e], sv[e], ss);
      }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    if (lane == 0) s_wsum[t][q] = ss;
  }
  __syncthreads();

  // 3. r of every row (each warp sums the norm warps' partial sums as the norm kernel does), then
  //    y = (v * r) * gamma, what the router reads (over the delta rows, all read by now); block `rank`
  //    writes every csize-th chunk of out = bf16(y).
  float r_tok[kTokens];
#pragma unroll
  for (int t = 0; t < kTokens; ++t) {
    float total = t < T && lane < row_warps ? s_wsum[t][lane] : 0.0f;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) total += __shfl_xor_sync(0xffffffffu, total, o);
    r_tok[t] = rsqrtf(total / float(H) + a.eps);
  }
  for (int i = tid; i < T * chunks; i += int(blockDim.x)) {
    const int t = i / chunks, idx = i - t * chunks;
    float r = r_tok[0];
#pragma unroll
    for (int u = 1; u < kTokens; ++u)
      if (t == u) r = r_tok[u];
    const float4 v0 = reinterpret_cast<const float4*>(v)[2 * i],
                 v1 = reinterpret_cast<const float4*>(v)[2 * i + 1];
    const float4 g0 = reinterpret_cast<const float4*>(g)[2 * idx],
                 g1 = reinterpret_cast<const float4*>(g)[2 * idx + 1];
    const float gv[8] = {g0.x, g0.y, g0.z, g0.w, g1.x, g1.y, g1.z, g1.w};
    float out[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      out[e] = __fmul_rn(__fmul_rn(out[e], r), gv[e]);
      if (!a.precise) out[e] = bf16_bits_to_float(float_to_bf16_bits(out[e]));
    }
    reinterpret_cast<float4*>(y)[(2 * t) * chunks + idx] = make_float4(out[0], out[1], out[2], out[3]);
    reinterpret_cast<float4*>(y)[(2 * t + 1) * chunks + idx] = make_float4(out[4], out[5], out[6], out[7]);
    if (unsigned(i) % csize == rank)
      reinterpret_cast<uint4*>(a.out)[i] =
          make_uint4(pack_bf16x2(out[0], out[1]), pack_bf16x2(out[2], out[3]), pack_bf16x2(out[4], out[5]),
                     pack_bf16x2(out[6], out[7]));
  }
  __syncthreads();

  // 4. This warp's expert for every token: lane sums its columns in order, then the warp's lanes; the logit
  //    goes to block 0 (st.async, counted on its barrier).
  if (scorer) {
    float acc[kTokens];
#pragma unroll
    for (int t = 0; t < kTokens; ++t) acc[t] = 0.0f;
#pragma unroll
    for (int j = 0; j < kWChunks; ++j) {
      const int idx = lane + 32 * j;
      if (idx < chunks) {
        float wf[8];
        bf16x8_to_float(w[j], wf);
#pragma unroll
        for (int t = 0; t < kTokens; ++t) {
          if (t < T) {
            const float4 y0 = reinterpret_cast<const float4*>(y)[(2 * t) * chunks + idx];
            const float4 y1 = reinterpret_cast<const float4*>(y)[(2 * t + 1) * chunks + idx];
            const float yv[8] = {y0.x, y0.y, y0.z, y0.w, y1.x, y1.y, y1.z, y1.w};
#pragma unroll
            for (int e = 0; e < 8; ++e) acc[t] = fmaf(wf[e], yv[e], acc[t]);
          }
        }
      }
    }
#pragma unroll
    for (int t = 0; t < kTokens; ++t)
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) acc[t] += __shfl_xor_sync(0xffffffffu, acc[t], o);
    cluster_wait();
    if (lane == 0) {
#pragma unroll
      for (int t = 0; t < kTokens; ++t)
        if (t < T) {
          const float logit = acc[t] + bias;  // NaN (from NaN inputs) ranks as -inf: top-k stays a ranking
          st_async_remote(s_logits + t * E + expert, logit == logit ? logit : -INFINITY, &s_logits_bar, 0);
        }
    }
  } else {
    cluster_wait();
  }
  if (rank != 0) return;

  // 5. Block 0, once every logit is in: the next kernel may launch, then the residual, the logits, top-k and
  //    the permutation.
  mbar_wait(&s_logits_bar, 0);
  if (p.trigger) pdl_launch_dependents();
  for (int i = tid; i < T * chunks; i += int(blockDim.x)) {
    reinterpret_cast<float4*>(a.residual)[2 * i] = reinterpret_cast<const float4*>(v)[2 * i];
    reinterpret_cast<float4*>(a.residual)[2 * i + 1] = reinterpret_cast<const float4*>(v)[2 * i + 1];
  }
  for (int i = tid; i < T * E; i += int(blockDim.x)) a.logits[i] = s_logits[i];
  topk_rank(s_logits, T, E, a.top_k, s_sel, s_idx);
  __syncthreads();
  topk_weights(s_sel, s_idx, T, a.top_k, a.topk_idx, a.topk_w);
  permute_small<kMaxWarps>(s_idx, T * a.top_k, a.top_k, E, p.km, p.num_keys, a.routing, psm);
}

template <int kTokens>
struct NormRouteTag {};  // one shared-memory attribute flag per instantiation

template <int kTokens>
void launch(const Params& p, int cluster, int warps, cudaStream_t stream) {
  ensure_dynamic_smem<NormRouteTag<kTokens>>(norm_route_kernel<kTokens>, kMaxDynamicBytes);
  launch_pdl_cluster(norm_route_kernel<kTokens>, dim3(unsigned(cluster)), dim3(unsigned(warps * 32)),
                     dynamic_bytes(p.a.num_tokens, p.a.hidden), unsigned(cluster), stream, p);
}

}  // namespace

bool norm_route_fits(int num_tokens, int hidden, int num_experts, int top_k) {
  return num_tokens >= 1 && num_tokens <= kNormRouteMaxTokens && hidden > 0 && hidden % 8 == 0 &&
         hidden <= kMaxHidden && dynamic_bytes(num_tokens, hidden) <= size_t(kMaxDynamicBytes) &&
         norm::detail::row_threads(hidden) <= kMaxRowWarps * 32 && num_experts >= 1 &&
         num_experts <= kMaxExperts && top_k >= 1 && top_k <= kMoeMaxTopK && top_k <= num_experts;
}

void moe_norm_route(const NormRouteArgs& a, cudaStream_t stream) {
  ORCHID_KERNEL_REQUIRE(norm_route_fits(a.num_tokens, a.hidden, a.num_experts, a.top_k),
                        "moe_norm_route: shapes outside the fused kernel (norm_route_fits)");
  ORCHID_KERNEL_REQUIRE(a.residual && a.delta && a.gamma && a.out && a.router_w && a.router_b && a.logits &&
                            a.topk_idx && a.topk_w && a.routing.offsets && a.routing.row_token &&
                            a.routing.row_expert && a.routing.slot_row && a.routing.active &&
                            a.routing.num_active,
                        "moe_norm_route: null pointer");
  auto aligned = [](const void* q) { return (reinterpret_cast<uintptr_t>(q) & 15) == 0; };
  ORCHID_KERNEL_REQUIRE(
      aligned(a.residual) && aligned(a.delta) && aligned(a.gamma) && aligned(a.out) && aligned(a.router_w),
      "moe_norm_route: pointers must be 16-byte aligned");
  Params p;
  p.a = a;
  p.km = key_map(a.num_experts, a.range, &p.num_keys);
  p.row_threads = norm::detail::row_threads(a.hidden);
  // The next kernel (the gate_up GEMM, which waits for this one) launches while block 0 routes: its launch
  // and CTA start-up leave the step's critical path (-0.2% a step at 1 token; ORCHID_NORM_ROUTE_TRIGGER=0
  // keeps it back, for measurement).
  static const bool trigger = [] {
    const char* v = std::getenv("ORCHID_NORM_ROUTE_TRIGGER");
    return v == nullptr || std::atoi(v) != 0;
  }();
  p.trigger = trigger;
  // Blocks: one warp an expert, 8 experts a block (ORCHID_NORM_ROUTE_CLUSTER=2/4/8 asks for that many, as
  // far as at most 16 warps a block and 8 blocks allow; for measurement).
  static const int asked = [] {
    const char* v = std::getenv("ORCHID_NORM_ROUTE_CLUSTER");
    return v != nullptr ? std::atoi(v) : 0;
  }();
  int cluster = asked > 0 ? asked : (a.num_experts + 7) / 8;
  cluster = std::min(kMaxCluster, std::max(cluster, (a.num_experts + kMaxWarps - 1) / kMaxWarps));
  p.per_block = (a.num_experts + cluster - 1) / cluster;
  // At least 8 warps: the permutation needs a thread per key (kMoeMaxExperts).
  const int warps = std::max(kMoeMaxExperts / 32, p.per_block);
  if (a.num_tokens == 1) {
    launch<1>(p, cluster, warps, stream);
  } else if (a.num_tokens == 2) {
    launch<2>(p, cluster, warps, stream);
  } else {
    launch<kNormRouteMaxTokens>(p, cluster, warps, stream);
  }
  ORCHID_CUDA_CHECK_LAUNCH();
}

}  // namespace orchid::kernels
