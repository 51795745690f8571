// The residual RMSNorm, the router and the routing of a small batch in one cluster launch (norm_route.h).
//
// Napkin math, gpt-oss-20b at one token: the router row of an expert is 5.8 KB (184 KB for 32), the residual
// and delta rows 17 KB; a few hundred nanoseconds of arithmetic. What the three kernels it replaces cost (a
// decode step at batch 1 on an H100: 5.5 + 4.1 + 5.8 us a layer) is launch and dependency latency, so this
// kernel loads its router rows before it waits for the O projection and keeps every phase on chip.
//
// Phases (block r of a cluster of C; W warps of which the first per_block score one expert each):
//   1. router rows into registers; pdl_wait
//   2. v = residual + delta for every token into shared memory; each row's sum of squares in
//      rmsnorm_row.cuh's order (virtual threads of the norm kernel's block size), so r = rsqrt(...) has its
//      bits
//   3. y = (v * r) * gamma in place (bf16-rounded unless precise)
//   4. logits of the block's experts -> block 0's shared memory (distributed shared memory); cluster barrier
//   5. block 0: residual and out written, then top-k and the permutation (routing_device.cuh)
// Every block reads the residual in phase 2 and only block 0 writes it, after the cluster barrier.
#include "kernels/moe/norm_route.h"

#include <cooperative_groups.h>

#include <algorithm>

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
constexpr int kMaxExperts = 128;  // kPerLane <= 4
constexpr int kWChunks = 12;      // 16-byte pieces of a router row per lane: hidden <= 32 * 12 * 8 = 3072
constexpr int kMaxHidden = 32 * kWChunks * 8;
constexpr int kMaxRowWarps = 32;  // warps of the norm kernel's row block (rmsnorm_row.cuh)

struct Params {
  NormRouteArgs a;
  KeyMap km;
  int num_keys;
  int per_block;    // experts a block scores
  int row_threads;  // the norm kernel's block size for this hidden size
};

__device__ __forceinline__ void cluster_arrive_relaxed() {
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() {
  asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");
}

// v = residual + delta for chunk idx (8 columns) of token t, as the norm kernel adds them.
__device__ __forceinline__ void residual_sum8(const NormRouteArgs& a, int t, int idx, float (&v)[8]) {
  const size_t row = size_t(t) * size_t(a.hidden);
  const float4 x0 = reinterpret_cast<const float4*>(a.residual + row)[2 * idx];
  const float4 x1 = reinterpret_cast<const float4*>(a.residual + row)[2 * idx + 1];
  float d[8];
  bf16x8_to_float(reinterpret_cast<const uint4*>(a.delta + row)[idx], d);
  const float x[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
#pragma unroll
  for (int e = 0; e < 8; ++e) v[e] = __fadd_rn(x[e], d[e]);
}

template <int kPerLane>
__global__ void __launch_bounds__(kMaxWarps * 32) norm_route_kernel(Params p) {
  extern __shared__ __align__(16) float n[];  // [T][H]: v, then y
  __shared__ float s_logits[kNormRouteMaxTokens * kMaxExperts];
  __shared__ float s_wsum[kNormRouteMaxTokens][kMaxRowWarps];
  __shared__ float s_r[kNormRouteMaxTokens];
  __shared__ int s_idx[kNormRouteMaxTokens * kMoeMaxTopK];
  __shared__ PermuteSmem<kMaxWarps> psm;
  const NormRouteArgs& a = p.a;
  cg::cluster_group cluster = cg::this_cluster();
  const int rank = int(cluster.block_rank());
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, warps = int(blockDim.x) / 32;
  const int T = a.num_tokens, H = a.hidden, E = a.num_experts, chunks = H / 8;

  // 1. This warp's router row (a constant: read before the wait, overlapping the O projection's tail).
  const int expert = rank * p.per_block + warp;
  const bool scorer = warp < p.per_block && expert < E;
  uint4 w[kWChunks];
#pragma unroll
  for (int j = 0; j < kWChunks; ++j) {
    const int idx = lane + 32 * j;
    w[j] = scorer && idx < chunks ? reinterpret_cast<const uint4*>(a.router_w + size_t(expert) * H)[idx]
                                  : make_uint4(0, 0, 0, 0);
  }
  const float bias = scorer ? a.router_b[expert] : 0.0f;
  cluster_arrive_relaxed();  // every block has started before block 0's shared memory is written (phase 4)
  pdl_wait();

  // 2. v, then each row's sum of squares as the norm kernel's thread vt and warp q form it.
  for (int i = tid; i < T * chunks; i += int(blockDim.x)) {
    const int t = i / chunks, idx = i % chunks;
    float v[8];
    residual_sum8(a, t, idx, v);
    float4* dst = reinterpret_cast<float4*>(n + size_t(t) * H) + 2 * idx;
    dst[0] = make_float4(v[0], v[1], v[2], v[3]);
    dst[1] = make_float4(v[4], v[5], v[6], v[7]);
  }
  __syncthreads();
  const int row_warps = p.row_threads / 32;
  for (int pair = warp; pair < T * row_warps; pair += warps) {
    const int t = pair / row_warps, q = pair % row_warps, vt = 32 * q + lane;
    float ss = 0.0f;
#pragma unroll
    for (int c = 0; c < norm::detail::kMaxChunks; ++c) {
      const int idx = vt + c * p.row_threads;
      if (idx < chunks) {
        const float* src = n + size_t(t) * H + 8 * idx;
#pragma unroll
        for (int e = 0; e < 8; ++e) ss = fmaf(src[e], src[e], ss);
      }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    if (lane == 0) s_wsum[t][q] = ss;
  }
  __syncthreads();
  for (int t = warp; t < T; t += warps) {
    float total = lane < row_warps ? s_wsum[t][lane] : 0.0f;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) total += __shfl_xor_sync(0xffffffffu, total, o);
    if (lane == 0) s_r[t] = rsqrtf(total / float(H) + a.eps);
  }
  __syncthreads();

  // 3. y = (v * r) * gamma, what the router reads.
  for (int i = tid; i < T * chunks; i += int(blockDim.x)) {
    const int t = i / chunks, idx = i % chunks;
    float4* v = reinterpret_cast<float4*>(n + size_t(t) * H) + 2 * idx;
    const float4 g0 = reinterpret_cast<const float4*>(a.gamma)[2 * idx];
    const float4 g1 = reinterpret_cast<const float4*>(a.gamma)[2 * idx + 1];
    const float4 v0 = v[0], v1 = v[1];
    const float g[8] = {g0.x, g0.y, g0.z, g0.w, g1.x, g1.y, g1.z, g1.w};
    float y[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      y[e] = __fmul_rn(__fmul_rn(y[e], s_r[t]), g[e]);
      if (!a.precise) y[e] = bf16_bits_to_float(float_to_bf16_bits(y[e]));
    }
    v[0] = make_float4(y[0], y[1], y[2], y[3]);
    v[1] = make_float4(y[4], y[5], y[6], y[7]);
  }
  __syncthreads();

  // 4. This warp's expert for every token: lane sums its columns in order, then the warp's lanes.
  if (scorer) {
    float acc[kNormRouteMaxTokens];
#pragma unroll
    for (int t = 0; t < kNormRouteMaxTokens; ++t) acc[t] = 0.0f;
#pragma unroll
    for (int j = 0; j < kWChunks; ++j) {
      const int idx = lane + 32 * j;
      if (idx < chunks) {
        float wf[8];
        bf16x8_to_float(w[j], wf);
#pragma unroll
        for (int t = 0; t < kNormRouteMaxTokens; ++t) {
          if (t < T) {
            const float4 y0 = reinterpret_cast<const float4*>(n + size_t(t) * H)[2 * idx];
            const float4 y1 = reinterpret_cast<const float4*>(n + size_t(t) * H)[2 * idx + 1];
            const float y[8] = {y0.x, y0.y, y0.z, y0.w, y1.x, y1.y, y1.z, y1.w};
#pragma unroll
            for (int e = 0; e < 8; ++e) acc[t] = fmaf(wf[e], y[e], acc[t]);
          }
        }
      }
    }
#pragma unroll
    for (int t = 0; t < kNormRouteMaxTokens; ++t)
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) acc[t] += __shfl_xor_sync(0xffffffffu, acc[t], o);
    cluster_wait();
    if (lane == 0) {
      float* dst = cluster.map_shared_rank(s_logits, 0);
#pragma unroll
      for (int t = 0; t < kNormRouteMaxTokens; ++t)
        if (t < T) dst[t * E + expert] = acc[t] + bias;
    }
  } else {
    cluster_wait();
  }
  cluster.sync();  // block 0 holds every logit; every block is done reading the residual
  if (rank != 0) return;

  // 5. The residual and the experts' input (block 0 alone), the logits, top-k, the permutation.
  for (int i = tid; i < T * chunks; i += int(blockDim.x)) {
    const int t = i / chunks, idx = i % chunks;
    float v[8];
    residual_sum8(a, t, idx, v);
    const size_t row = size_t(t) * size_t(H);
    float4* res = reinterpret_cast<float4*>(a.residual + row) + 2 * idx;
    res[0] = make_float4(v[0], v[1], v[2], v[3]);
    res[1] = make_float4(v[4], v[5], v[6], v[7]);
    const float4 g0 = reinterpret_cast<const float4*>(a.gamma)[2 * idx];
    const float4 g1 = reinterpret_cast<const float4*>(a.gamma)[2 * idx + 1];
    const float g[8] = {g0.x, g0.y, g0.z, g0.w, g1.x, g1.y, g1.z, g1.w};
    float y[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) y[e] = __fmul_rn(__fmul_rn(v[e], s_r[t]), g[e]);
    reinterpret_cast<uint4*>(a.out + row)[idx] = make_uint4(pack_bf16x2(y[0], y[1]), pack_bf16x2(y[2], y[3]),
                                                            pack_bf16x2(y[4], y[5]), pack_bf16x2(y[6], y[7]));
  }
  for (int i = tid; i < T * E; i += int(blockDim.x)) a.logits[i] = s_logits[i];
  for (int t = warp; t < T; t += warps)
    topk_one_token<kPerLane>(s_logits + t * E, nullptr, nullptr, E, a.top_k, lane, a.topk_idx + t * a.top_k,
                             a.topk_w + t * a.top_k, s_idx + t * a.top_k);
  __syncthreads();
  permute_small<kMaxWarps>(s_idx, T * a.top_k, a.top_k, E, p.km, p.num_keys, a.routing, psm);
}

template <int kPerLane>
struct NormRouteTag {};  // one shared-memory attribute flag per instantiation

template <int kPerLane>
void launch(const Params& p, int cluster, int warps, cudaStream_t stream) {
  constexpr int kMaxDynamic = kNormRouteMaxTokens * kMaxHidden * 4;
  ensure_dynamic_smem<NormRouteTag<kPerLane>>(norm_route_kernel<kPerLane>, kMaxDynamic);
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(unsigned(cluster));
  cfg.blockDim = dim3(unsigned(warps * 32));
  cfg.dynamicSmemBytes = size_t(p.a.num_tokens) * size_t(p.a.hidden) * 4;
  cfg.stream = stream;
  cudaLaunchAttribute attr[2];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = unsigned(cluster);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  attr[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[1].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl_enabled() ? 2 : 1;
  ORCHID_CUDA_CHECK(cudaLaunchKernelEx(&cfg, norm_route_kernel<kPerLane>, p));
}

}  // namespace

bool norm_route_fits(int num_tokens, int hidden, int num_experts, int top_k) {
  return num_tokens >= 1 && num_tokens <= kNormRouteMaxTokens && hidden > 0 && hidden % 8 == 0 &&
         hidden <= kMaxHidden && norm::detail::row_threads(hidden) <= kMaxRowWarps * 32 && num_experts >= 1 &&
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
  const int count = a.range.count > 0 ? a.range.count : a.num_experts;
  ORCHID_KERNEL_REQUIRE(a.range.begin >= 0 && a.range.begin + count <= a.num_experts,
                        "moe_norm_route: expert range outside the experts");
  Params p;
  p.a = a;
  p.km = KeyMap{a.range.begin, count};
  p.num_keys = count + (count < a.num_experts ? 1 : 0);
  p.row_threads = norm::detail::row_threads(a.hidden);
  const int cluster = std::min(kMaxCluster, (a.num_experts + 7) / 8);
  p.per_block = (a.num_experts + cluster - 1) / cluster;
  // At least 8 warps: the permutation needs a thread per key (kMoeMaxExperts).
  const int warps = std::max(kMoeMaxExperts / 32, p.per_block);
  if (a.num_experts <= 32) {
    launch<1>(p, cluster, warps, stream);
  } else if (a.num_experts <= 64) {
    launch<2>(p, cluster, warps, stream);
  } else {
    launch<4>(p, cluster, warps, stream);
  }
  ORCHID_CUDA_CHECK_LAUNCH();
}

}  // namespace orchid::kernels
