// The router GEMM, top-k and the permutation of a batch in one launch (router_route.h).
//
// Napkin math, gpt-oss-20b at 256 tokens (split input: 512 rows of 2880, 32 experts): 94 MFLOP of bf16 MMAs
// (a few microseconds of one SM's tensor cores, spread over 128 CTAs: well under one), 2.9 MB of rows and
// 184 KB of router weights read once per token group (16 groups: 3 MB from L2). So the launch is latency:
// one staging round trip, ~23 MMAs a warp, two ticket round trips, the block permutation (~20 barriers).
//
// CTA (g, s) of groups x slices: tokens [16 g, 16 g + 16), k16 steps [s * steps_per_slice, ...). Shared
// memory (dynamic): the router rows' slice [E rounded to 8][stride] bf16, the tokens' slice [16 or 32 rows:
// hi, then lo][stride], the MMA results [rows][E rounded to 8] fp32; the row stride (16 steps + 8 bf16) puts
// the eight rows of an ldmatrix on distinct banks. Warp w runs the (m16 tile, n8 tile) pairs w, w + 8, ...
// over the slice. The partial dot products go to the scratch ([slice][hi, lo][T][E] fp32); the last CTA of
// the group sums them in slice order and ranks the group's top-k (routing_device.cuh: the one-block top-k
// the fused norm kernel uses, equal to moe_route's); the last group permutes every token's picks in one
// block. The writes before each ticket are fenced (__threadfence) and the reads after it bypass L1.
//
// With the input norm (RouterRouteArgs::residual) a group's slices are a cluster of 8 CTAs: CTA r norms
// tokens 2r and 2r + 1 with the norm kernel's row block and order (so the residual and the experts' rows keep
// its bits), writes the rows, and stores each slice's part of the hi and lo halves straight into that CTA's
// staged rows (distributed shared memory, between cluster barriers); after the MMAs CTA r sums its two
// tokens' partial products from the cluster's shared memory in slice order and ranks them, and every CTA
// takes the last ticket (the last permutes). One launch replaces the norm kernel too, and the lo halves never
// leave the chip.
#include "kernels/moe/router_route.h"

#include <cooperative_groups.h>

#include <algorithm>
#include <cstdlib>

#include "kernels/common/bulk_copy.cuh"
#include "kernels/common/cuda_check.h"
#include "kernels/common/mma_sync.cuh"
#include "kernels/common/pdl.cuh"
#include "kernels/common/smem_attribute.h"
#include "kernels/moe/mxfp4_mma.cuh"
#include "kernels/moe/routing_device.cuh"
#include "kernels/norm/rmsnorm_row.cuh"

namespace orchid::kernels {
namespace {

namespace cg = cooperative_groups;
using namespace routing_detail;
using mxfp4_detail::cp_async_16;
using mxfp4_detail::cp_async_commit;
using mxfp4_detail::cp_async_wait;

constexpr int kThreads = 256, kWarps = kThreads / 32;
constexpr int kGroupTokens = 16;                        // one m16 tile of tokens (two with the lo rows)
constexpr int kMaxExperts = 128;                        // n8 tiles staged at once
constexpr int kMaxSlices = 16, kMaxStepsPerSlice = 32;  // k16 steps: hidden <= 8192
constexpr int kMaxGroups = kRouterRouteMaxItems / kGroupTokens;  // top_k 1: a token an item
constexpr int kAllTicket = kMaxGroups;                           // after the per-group tickets
constexpr int kTicketBytes = 512;                                // keeps the partial sums aligned
static_assert((kMaxGroups + 1) * 4 <= kTicketBytes, "the tickets fit their bytes");
constexpr int kPermuteWarps = kRouterRouteMaxItems / 32;  // PermuteSmem groups of 32 items
// With the input norm: the slices of a group are a cluster, each CTA norming two of its tokens with the norm
// kernel's row block (at most 128 threads a row: hidden <= 4096).
constexpr int kNormCluster = 8;
constexpr int kNormRows = kGroupTokens / kNormCluster;
constexpr int kNormMaxRowThreads = kThreads / kNormRows;
constexpr int kNormChunks = norm::detail::kMaxChunks;

struct Params {
  RouterRouteArgs a;
  KeyMap km;
  int num_keys;
  int groups, slices, steps_per_slice, total_steps;
  int stride;       // bf16 elements of a staged row
  int finishers;    // arrivals on the last ticket: the groups' last CTAs, or (with the norm) every CTA
  int row_threads;  // with the norm: the norm kernel's block size for this hidden size
};

size_t mma_smem_bytes(int num_experts, int split, int steps_per_slice) {
  const size_t cols = size_t(num_experts + 7) / 8 * 8, rows = size_t(split ? 2 : 1) * kGroupTokens;
  const size_t stride = size_t(steps_per_slice) * 16 + 8;
  return (cols + rows) * stride * 2 + rows * cols * 4;
}
constexpr size_t kPermuteSmemBytes = kRouterRouteMaxItems * 4 + sizeof(PermuteSmem<kPermuteWarps>);
size_t smem_bytes(int num_experts, int split, int steps_per_slice) {
  return std::max(mma_smem_bytes(num_experts, split, steps_per_slice), kPermuteSmemBytes);
}
const int kMaxSmemBytes =
    int(std::max((size_t(kMaxExperts) + 2 * kGroupTokens) * (size_t(kMaxStepsPerSlice) * 16 + 8) * 2 +
                     size_t(2 * kGroupTokens) * kMaxExperts * 4,
                 kPermuteSmemBytes));

// The input norm of the cluster's CTA `rank` (two tokens of the group): residual += delta written back, the
// norm kernel's sum of squares (thread vt of row j holds chunks vt, vt + rt, ... in registers; warp shuffles,
// then the row's warps through shared memory), out = bf16(y) written, and y's hi (and lo) halves sent to
// the staged rows of the CTA of each chunk's slice. Ends with the cluster barrier after which every CTA's
// rows are in. The caller arrived on the cluster barrier before its dependency wait.
__device__ __forceinline__ void norm_rows(const Params& p, int g, int rank, __nv_bfloat16* sa,
                                          float (&s_wsum)[kNormRows][kNormMaxRowThreads / 32]) {
  const RouterRouteArgs& a = p.a;
  const int T = a.num_tokens, H = a.hidden, chunks = H / 8, rt = p.row_threads;
  const int tid = threadIdx.x, lane = tid % 32;
  const int j = tid / rt, vt = tid - j * rt, tl = rank * kNormRows + j, t = g * kGroupTokens + tl;
  const bool mine = j < kNormRows && t < T;  // uniform over a warp: rt is whole warps
  float v[kNormChunks][8];
  float ss = 0.0f;
  if (mine) {
    float* res = a.residual + size_t(t) * H;
    const __nv_bfloat16* del = a.delta + size_t(t) * H;
#pragma unroll
    for (int c = 0; c < kNormChunks; ++c) {
      const int idx = vt + c * rt;
      if (idx < chunks) {
        const float4 x0 = reinterpret_cast<const float4*>(res)[2 * idx];
        const float4 x1 = reinterpret_cast<const float4*>(res)[2 * idx + 1];
        float d[8];
        bf16x8_to_float(reinterpret_cast<const uint4*>(del)[idx], d);
        const float xv[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
#pragma unroll
        for (int e = 0; e < 8; ++e) v[c][e] = __fadd_rn(xv[e], d[e]);
        reinterpret_cast<float4*>(res)[2 * idx] = make_float4(v[c][0], v[c][1], v[c][2], v[c][3]);
        reinterpret_cast<float4*>(res)[2 * idx + 1] = make_float4(v[c][4], v[c][5], v[c][6], v[c][7]);
#pragma unroll
        for (int e = 0; e < 8; ++e) ss = fmaf(v[c][e], v[c][e], ss);
      }
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  if (mine && lane == 0) s_wsum[j][vt / 32] = ss;
  __syncthreads();
  float total = mine && lane < rt / 32 ? s_wsum[j][lane] : 0.0f;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) total += __shfl_xor_sync(0xffffffffu, total, o);
  const float r = rsqrtf(total / float(H) + a.eps);
  cg::cluster_group cluster = cg::this_cluster();
  cluster.barrier_wait();  // the kernel's arrive: every CTA of the cluster has started
  if (mine) {
    const int slice_cols = p.steps_per_slice * 16;
#pragma unroll
    for (int c = 0; c < kNormChunks; ++c) {
      const int idx = vt + c * rt;
      if (idx < chunks) {
        const float4 ga = reinterpret_cast<const float4*>(a.gamma)[2 * idx];
        const float4 gb = reinterpret_cast<const float4*>(a.gamma)[2 * idx + 1];
        const float gv[8] = {ga.x, ga.y, ga.z, ga.w, gb.x, gb.y, gb.z, gb.w};
        float y[8];
#pragma unroll
        for (int e = 0; e < 8; ++e) y[e] = __fmul_rn(__fmul_rn(v[c][e], r), gv[e]);
        const uint4 hi = make_uint4(pack_bf16x2(y[0], y[1]), pack_bf16x2(y[2], y[3]), pack_bf16x2(y[4], y[5]),
                                    pack_bf16x2(y[6], y[7]));
        reinterpret_cast<uint4*>(a.out + size_t(t) * H)[idx] = hi;
        const int col = idx * 8, q = col / slice_cols, off = col - q * slice_cols;
        __nv_bfloat16* dst = sa + size_t(tl) * p.stride + off;
        *cluster.map_shared_rank(reinterpret_cast<uint4*>(dst), unsigned(q)) = hi;
        if (a.split) {
          float h8[8];
          bf16x8_to_float(hi, h8);
#pragma unroll
          for (int e = 0; e < 8; ++e) h8[e] = __fsub_rn(y[e], h8[e]);  // exact (Sterbenz)
          const uint4 lo = make_uint4(pack_bf16x2(h8[0], h8[1]), pack_bf16x2(h8[2], h8[3]),
                                      pack_bf16x2(h8[4], h8[5]), pack_bf16x2(h8[6], h8[7]));
          *cluster.map_shared_rank(reinterpret_cast<uint4*>(dst + size_t(kGroupTokens) * p.stride),
                                   unsigned(q)) = lo;
        }
      }
    }
  }
  cluster.sync();
}

// Token t's logit for expert e from its summed dot products (hi rows, and lo rows with a split input): the
// logits written as the router GEMM would (split: both halves, no bias), the value ranked returned (NaN,
// from NaN inputs, ranks as -inf).
__device__ __forceinline__ float finish_logit(const RouterRouteArgs& a, int t, int e, float hi, float lo) {
  const int T = a.num_tokens, E = a.num_experts;
  float v;
  if (a.split) {
    a.logits[size_t(t) * E + e] = hi;
    a.logits[size_t(T + t) * E + e] = lo;
    v = (hi + lo) + a.router_b[e];
  } else {
    v = hi + a.router_b[e];
    a.logits[size_t(t) * E + e] = v;
  }
  return v == v ? v : -INFINITY;
}

template <bool kNorm>
__global__ void __launch_bounds__(kThreads) router_route_kernel(Params p) {
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ __align__(16) float s_logits[kGroupTokens * kMaxExperts];
  __shared__ float s_val[kGroupTokens * kMoeMaxTopK];
  __shared__ int s_idx[kGroupTokens * kMoeMaxTopK];
  __shared__ float s_wsum[kNormRows][kNormMaxRowThreads / 32];
  __shared__ int s_last;
  const RouterRouteArgs& a = p.a;
  const int T = a.num_tokens, H = a.hidden, E = a.num_experts, K = a.top_k;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = int(blockIdx.x) / p.slices, s = int(blockIdx.x) - g * p.slices;
  const int k0 = s * p.steps_per_slice * 16;
  const int steps = min(p.steps_per_slice, p.total_steps - s * p.steps_per_slice);  // <= 0: an empty slice
  const int m_tiles = a.split ? 2 : 1, n_tiles = (E + 7) / 8, cols = n_tiles * 8, stride = p.stride;
  const int pieces = 2 * steps;  // 16-byte pieces of a staged row
  auto* sw = reinterpret_cast<__nv_bfloat16*>(smem);
  auto* sa = sw + size_t(cols) * stride;
  auto* sc = reinterpret_cast<float*>(sa + size_t(m_tiles) * kGroupTokens * stride);
  const int t0 = g * kGroupTokens, tg = min(kGroupTokens, T - t0);

  // 1. The router rows' slice (weights: before the dependency wait), then the tokens' rows: staged from x
  //    (zero past T), or normed by the cluster (rows past T are never written: their MMA rows are dropped).
  for (int x = tid; x < cols * pieces; x += kThreads) {
    const int r = x / pieces, c = x - r * pieces;
    const bool ok = r < E;
    cp_async_16(sw + size_t(r) * stride + c * 8, a.router_w + size_t(ok ? r : 0) * H + k0 + c * 8, ok);
  }
  cp_async_commit();
  // With the norm, every CTA of the cluster must have started before another writes its shared memory.
  if constexpr (kNorm) cg::this_cluster().barrier_arrive();
  pdl_wait();
  if constexpr (kNorm) {
    norm_rows(p, g, s, sa, s_wsum);
    cp_async_wait<0>();
    __syncthreads();
  } else {
    for (int x = tid; x < m_tiles * kGroupTokens * pieces; x += kThreads) {
      const int r = x / pieces, c = x - r * pieces;
      const int t = t0 + (r % kGroupTokens), half = r / kGroupTokens;
      const bool ok = t < T;
      cp_async_16(sa + size_t(r) * stride + c * 8, a.x + (size_t(half) * T + (ok ? t : 0)) * H + k0 + c * 8,
                  ok);
    }
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
  }

  // 2. The partial dot products: warp w takes the (m16, n8) tile pairs w, w + 8, ... over the slice.
  const uint32_t sw_at = smem_addr(sw), sa_at = smem_addr(sa);
  for (int pr = warp; pr < m_tiles * n_tiles; pr += kWarps) {
    const int mt = pr / n_tiles, nt = pr - mt * n_tiles;
    // ldmatrix rows: A's four 8x8 matrices (rows 0-7 / 8-15 x k 0-7 / 8-15) in a0..a3 order; B's two (the
    // tile's 8 router rows x k 0-7 / 8-15), which are b0 and b1 as they are (B[k][n] = w[n][k]).
    const int a_row = mt * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, a_col = (lane >> 4) * 8;
    const int b_row = nt * 8 + (lane & 7), b_col = ((lane >> 3) & 1) * 8;
    const uint32_t a_at = sa_at + uint32_t(a_row * stride + a_col) * 2;
    const uint32_t b_at = sw_at + uint32_t(b_row * stride + b_col) * 2;
    // Two accumulator sets (even and odd steps), so that consecutive MMAs do not wait for each other.
    float c[4] = {0.0f, 0.0f, 0.0f, 0.0f}, d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    auto step = [&](int st, float(&acc)[4]) {
      uint32_t af[4], bf[2];
      ldmatrix_x4(a_at + uint32_t(st) * 32, af);
      ldmatrix_x2(b_at + uint32_t(st) * 32, bf);
      mma_m16n8k16_bf16(acc, af[0], af[1], af[2], af[3], bf[0], bf[1]);
    };
#pragma unroll 2
    for (int st = 0; st + 1 < steps; st += 2) {
      step(st, c);
      step(st + 1, d);
    }
    if (steps > 0 && steps % 2 != 0) step(steps - 1, c);
#pragma unroll
    for (int i = 0; i < 4; ++i) c[i] += d[i];
    const int row = mt * 16 + lane / 4, col = nt * 8 + 2 * (lane % 4);
    sc[row * cols + col] = c[0];
    sc[row * cols + col + 1] = c[1];
    sc[(row + 8) * cols + col] = c[2];
    sc[(row + 8) * cols + col + 1] = c[3];
  }
  // The next kernel (the expert GEMMs' preparation, which waits for this one) may launch.
  pdl_launch_dependents();
  __syncthreads();
  int* tickets = static_cast<int*>(a.scratch);

  // 3. Each token's logits (the slices summed in order) and its group's top-k: with the norm, CTA `rank` of
  //    the cluster reads its two tokens' partial sums from every CTA's shared memory; else the group's last
  //    CTA (a ticket) reads them from the scratch.
  int t_first, t_count;
  const float* part = nullptr;
  if constexpr (kNorm) {
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();  // every CTA's partial sums are in
    t_first = t0 + s * kNormRows;
    t_count = max(0, min(kNormRows, T - t_first));
    for (int x = tid; x < t_count * E; x += kThreads) {
      const int jj = x / E, e = x - jj * E, tl = s * kNormRows + jj, t = t_first + jj;
      float hi = 0.0f, lo = 0.0f;
      for (int q = 0; q < p.slices; ++q) {
        const float* rsc = cluster.map_shared_rank(sc, unsigned(q));
        hi += rsc[tl * cols + e];
        if (a.split) lo += rsc[(kGroupTokens + tl) * cols + e];
      }
      s_logits[jj * E + e] = finish_logit(a, t, e, hi, lo);
    }
    cluster.sync();  // no CTA reuses or leaves its shared memory while another reads it
  } else {
    float* parts = reinterpret_cast<float*>(static_cast<uint8_t*>(a.scratch) + kTicketBytes);
    for (int x = tid; x < m_tiles * tg * E; x += kThreads) {
      const int half = x / (tg * E), rem = x - half * tg * E, tl = rem / E, e = rem - tl * E;
      parts[((size_t(s) * 2 + half) * T + t0 + tl) * E + e] = sc[(half * kGroupTokens + tl) * cols + e];
    }
    __syncthreads();
    if (tid == 0) {
      __threadfence();
      s_last = atomicAdd(&tickets[g], 1) == p.slices - 1;
    }
    __syncthreads();
    if (!s_last) return;
    __threadfence();
    if (tid == 0) tickets[g] = 0;  // every CTA of the group has taken its ticket
    part = parts;
    t_first = t0;
    t_count = tg;
    for (int x = tid; x < tg * E; x += kThreads) {
      const int tl = x / E, e = x - tl * E, t = t0 + tl;
      float hi = 0.0f, lo = 0.0f;
      for (int q = 0; q < p.slices; ++q) {
        hi += __ldcg(part + (size_t(q) * 2 * T + t) * E + e);
        if (a.split) lo += __ldcg(part + ((size_t(q) * 2 + 1) * T + t) * E + e);
      }
      s_logits[tl * E + e] = finish_logit(a, t, e, hi, lo);
    }
  }
  __syncthreads();
  if (t_count > 0) topk_rank(s_logits, t_count, E, K, s_val, s_idx);
  __syncthreads();
  if (t_count > 0)
    topk_weights(s_val, s_idx, t_count, K, a.topk_idx + size_t(t_first) * K, a.topk_w + size_t(t_first) * K);
  __syncthreads();
  if (tid == 0) {
    __threadfence();
    s_last = atomicAdd(&tickets[kAllTicket], 1) == p.finishers - 1;
  }
  __syncthreads();
  if (!s_last) return;

  // 4. The last to finish: every token's picks, permuted in this block (the staging area is free).
  __threadfence();
  if (tid == 0) tickets[kAllTicket] = 0;
  const int items = T * K;
  int* s_all = reinterpret_cast<int*>(smem);
  auto& psm = *reinterpret_cast<PermuteSmem<kPermuteWarps>*>(smem + kRouterRouteMaxItems * 4);
  for (int i = tid; i < items; i += kThreads) s_all[i] = __ldcg(a.topk_idx + i);
  __syncthreads();
  permute_small<kPermuteWarps>(s_all, items, K, E, p.km, p.num_keys, a.routing, psm);
}

template <bool kNorm>
struct RouterRouteTag {};  // one shared-memory attribute flag per instantiation

// Slices of k: 8 (128 CTAs at 256 tokens: the staging spread over most SMs; at most 32 k16 steps a slice by
// shared memory), the cluster's with the input norm, so that both variants sum the same partial products in
// the same order (the same logits with or without the norm). Not tuned by measurement yet;
// ORCHID_ROUTER_SLICES=N (1-16) asks for N to compare.
int choose_slices(int total_steps) {
  static const int asked = [] {
    const char* v = std::getenv("ORCHID_ROUTER_SLICES");
    return v != nullptr ? std::atoi(v) : 0;
  }();
  int want = asked > 0 ? asked : kNormCluster;
  want = std::min({want, kMaxSlices, total_steps});
  want = std::max(want, (total_steps + kMaxStepsPerSlice - 1) / kMaxStepsPerSlice);
  const int per = (total_steps + want - 1) / want;
  return (total_steps + per - 1) / per;  // no empty slice
}

}  // namespace

bool router_route_fits(int num_tokens, int hidden, int num_experts, int top_k, bool with_norm) {
  const bool fits = num_tokens >= 1 && top_k >= 1 && top_k <= kMoeMaxTopK && top_k <= num_experts &&
                    num_experts <= kMaxExperts && int64_t(num_tokens) * top_k <= kRouterRouteMaxItems &&
                    hidden > 0 && hidden % 16 == 0 && hidden / 16 <= kMaxSlices * kMaxStepsPerSlice;
  if (!with_norm) return fits;
  return fits && hidden / 16 <= kNormCluster * kMaxStepsPerSlice &&
         norm::detail::row_threads(hidden) <= kNormMaxRowThreads;
}

size_t router_route_scratch_bytes(int max_tokens, int num_experts) {
  const size_t tokens = size_t(std::max(0, std::min(max_tokens, kRouterRouteMaxItems)));
  return kTicketBytes + size_t(kMaxSlices) * 2 * tokens * size_t(num_experts) * 4;
}

void router_route_scratch_init(void* scratch, cudaStream_t stream) {
  ORCHID_CUDA_CHECK(cudaMemsetAsync(scratch, 0, kTicketBytes, stream));
}

void moe_router_route(const RouterRouteArgs& a, cudaStream_t stream) {
  const bool norm = a.residual != nullptr;
  ORCHID_KERNEL_REQUIRE(router_route_fits(a.num_tokens, a.hidden, a.num_experts, a.top_k, norm),
                        "moe_router_route: shapes outside the fused kernel (router_route_fits)");
  ORCHID_KERNEL_REQUIRE((norm ? a.delta && a.gamma && a.out : a.x != nullptr) && a.router_w && a.router_b &&
                            a.logits && a.topk_idx && a.topk_w && a.routing.offsets && a.routing.row_token &&
                            a.routing.row_expert && a.routing.slot_row && a.routing.active &&
                            a.routing.num_active && a.scratch,
                        "moe_router_route: null pointer");
  auto aligned = [](const void* q) { return (reinterpret_cast<uintptr_t>(q) & 15) == 0; };
  ORCHID_KERNEL_REQUIRE(aligned(a.x) && aligned(a.router_w) && aligned(a.scratch) && aligned(a.residual) &&
                            aligned(a.delta) && aligned(a.gamma) && aligned(a.out),
                        "moe_router_route: pointers must be 16-byte aligned");
  Params p;
  p.a = a;
  p.km = key_map(a.num_experts, a.range, &p.num_keys);
  p.groups = (a.num_tokens + kGroupTokens - 1) / kGroupTokens;
  p.total_steps = a.hidden / 16;
  // With the norm the slices are the cluster's CTAs (one may be empty at small hidden sizes).
  p.slices = norm ? kNormCluster : choose_slices(p.total_steps);
  p.steps_per_slice = (p.total_steps + p.slices - 1) / p.slices;
  p.stride = p.steps_per_slice * 16 + 8;
  p.finishers = norm ? p.groups * p.slices : p.groups;
  p.row_threads = norm ? norm::detail::row_threads(a.hidden) : 0;
  const dim3 grid(unsigned(p.groups * p.slices));
  const size_t bytes = smem_bytes(a.num_experts, a.split, p.steps_per_slice);
  if (norm) {
    ensure_dynamic_smem<RouterRouteTag<true>>(router_route_kernel<true>, kMaxSmemBytes);
    launch_pdl_cluster(router_route_kernel<true>, grid, dim3(kThreads), bytes, unsigned(kNormCluster), stream,
                       p);
  } else {
    ensure_dynamic_smem<RouterRouteTag<false>>(router_route_kernel<false>, kMaxSmemBytes);
    launch_pdl(router_route_kernel<false>, grid, dim3(kThreads), bytes, stream, p);
  }
  ORCHID_CUDA_CHECK_LAUNCH();
}

}  // namespace orchid::kernels
