// The residual RMSNorm, the router and the routing of a small batch in one cluster launch (norm_route.h).
//
// Napkin math, gpt-oss-20b at one token: the router row of an expert is 5.8 KB (184 KB for 32), the residual
// and delta rows 17 KB; a few hundred nanoseconds of arithmetic. What the three kernels it replaces cost (a
// decode step at batch 1 on an H100: 5.5 + 4.1 + 5.8 us a layer) is launch and dependency latency, so this
// kernel loads its router rows before it waits for the O projection and keeps every phase on chip.
//
// Phases (block r of a cluster of C; W warps of which the first per_block score one expert each):
//   1. router rows into registers (constants: read before the dependency wait); pdl_wait
//   2. the residual and delta rows into shared memory by two bulk copies, v = residual + delta; each row's
//      sum of squares in rmsnorm_row.cuh's order (virtual threads of the norm kernel's block size), so
//      r = rsqrt(...) has its bits
//   3. y = (v * r) * gamma over the delta rows (bf16-rounded unless precise)
//   4. logits of the block's experts -> block 0's shared memory (distributed shared memory); cluster barrier
//   5. block 0: residual (v) and out (bf16 y) written, then top-k and the permutation (routing_device.cuh)
// Every block reads the residual in phase 2 and only block 0 writes it, after the cluster barrier.
// Shared memory: 2 * T * H * 4 bytes (196 KB at 8 tokens of 3072) beside ~26 KB of fixed arrays. Every warp
// reads all T rows of y for its expert, so the kernel grows with T (moe_layer.cu takes it at 1-2 tokens).
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

template <int kPerLane>
__global__ void __launch_bounds__(kMaxWarps * 32) norm_route_kernel(Params p) {
  extern __shared__ __align__(128) float smem[];
  float* v = smem;  // [T][H]: the residual, then residual + delta
  float* y =
      smem + size_t(p.a.num_tokens) * p.a.hidden;  // [T][H]: the delta rows (bf16), then the norm output
  __shared__ uint64_t s_bar;
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
  if (tid == 0) {
    mbar_init(&s_bar, 1);
    mbar_init_fence();
  }
  __syncthreads();
  cluster_arrive_relaxed();  // every block has started before block 0's shared memory is written (phase 4)
  pdl_wait();

  // 2. The residual and delta rows by two bulk copies (every byte in flight at once), v = residual + delta in
  //    place, then each row's sum of squares as the norm kernel's thread vt and warp q form it.
  const uint32_t x_bytes = uint32_t(T) * uint32_t(H) * 4, d_bytes = uint32_t(T) * uint32_t(H) * 2;
  if (tid == 0) {
    mbar_arrive_expect_tx(&s_bar, x_bytes + d_bytes);
    bulk_copy_g2s(v, a.residual, x_bytes, &s_bar);
    bulk_copy_g2s(y, a.delta, d_bytes, &s_bar);
  }
  mbar_wait(&s_bar, 0);
  for (int i = tid; i < T * chunks; i += int(blockDim.x)) {
    float d[8];
    bf16x8_to_float(reinterpret_cast<const uint4*>(y)[i], d);
    float4* dst = reinterpret_cast<float4*>(v) + 2 * i;
    const float4 x0 = dst[0], x1 = dst[1];
    dst[0] = make_float4(__fadd_rn(x0.x, d[0]), __fadd_rn(x0.y, d[1]), __fadd_rn(x0.z, d[2]),
                         __fadd_rn(x0.w, d[3]));
    dst[1] = make_float4(__fadd_rn(x1.x, d[4]), __fadd_rn(x1.y, d[5]), __fadd_rn(x1.z, d[6]),
                         __fadd_rn(x1.w, d[7]));
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
        const float4 s0 = reinterpret_cast<const float4*>(v + size_t(t) * H)[2 * idx];
        const float4 s1 = reinterpret_cast<const float4*>(v + size_t(t) * H)[2 * idx + 1];
        const float sv[8] = {s0.x, s0.y, s0.z, s0.w, s1.x, s1.y, s1.z, s1.w};
#pragma unroll
        for (int e = 0; e < 8; ++e) ss = fmaf(sv[e], sv[e], ss);
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

  // 3. y = (v * r) * gamma, what the router reads (over the delta rows, all read by now).
  for (int i = tid; i < T * chunks; i += int(blockDim.x)) {
    const int t = i / chunks, idx = i % chunks;
    const float4 v0 = reinterpret_cast<const float4*>(v)[2 * i],
                 v1 = reinterpret_cast<const float4*>(v)[2 * i + 1];
    const float4 g0 = reinterpret_cast<const float4*>(a.gamma)[2 * idx];
    const float4 g1 = reinterpret_cast<const float4*>(a.gamma)[2 * idx + 1];
    const float g[8] = {g0.x, g0.y, g0.z, g0.w, g1.x, g1.y, g1.z, g1.w};
    float out[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      out[e] = __fmul_rn(__fmul_rn(out[e], s_r[t]), g[e]);
      if (!a.precise) out[e] = bf16_bits_to_float(float_to_bf16_bits(out[e]));
    }
    reinterpret_cast<float4*>(y)[2 * i] = make_float4(out[0], out[1], out[2], out[3]);
    reinterpret_cast<float4*>(y)[2 * i + 1] = make_float4(out[4], out[5], out[6], out[7]);
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
            const float4 y0 = reinterpret_cast<const float4*>(y + size_t(t) * H)[2 * idx];
            const float4 y1 = reinterpret_cast<const float4*>(y + size_t(t) * H)[2 * idx + 1];
            const float yv[8] = {y0.x, y0.y, y0.z, y0.w, y1.x, y1.y, y1.z, y1.w};
#pragma unroll
            for (int e = 0; e < 8; ++e) acc[t] = fmaf(wf[e], yv[e], acc[t]);
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
    reinterpret_cast<float4*>(a.residual)[2 * i] = reinterpret_cast<const float4*>(v)[2 * i];
    reinterpret_cast<float4*>(a.residual)[2 * i + 1] = reinterpret_cast<const float4*>(v)[2 * i + 1];
    const float4 y0 = reinterpret_cast<const float4*>(y)[2 * i],
                 y1 = reinterpret_cast<const float4*>(y)[2 * i + 1];
    reinterpret_cast<uint4*>(a.out)[i] = make_uint4(pack_bf16x2(y0.x, y0.y), pack_bf16x2(y0.z, y0.w),
                                                    pack_bf16x2(y1.x, y1.y), pack_bf16x2(y1.z, y1.w));
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
  constexpr int kMaxDynamic = 2 * kNormRouteMaxTokens * kMaxHidden * 4;
  ensure_dynamic_smem<NormRouteTag<kPerLane>>(norm_route_kernel<kPerLane>, kMaxDynamic);
  launch_pdl_cluster(norm_route_kernel<kPerLane>, dim3(unsigned(cluster)), dim3(unsigned(warps * 32)),
                     2 * size_t(p.a.num_tokens) * size_t(p.a.hidden) * 4, unsigned(cluster), stream, p);
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
  Params p;
  p.a = a;
  p.km = key_map(a.num_experts, a.range, &p.num_keys);
  p.row_threads = norm::detail::row_threads(a.hidden);
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
