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
#include "kernels/moe/router_route.h"

#include <algorithm>
#include <cstdlib>

#include "kernels/common/bulk_copy.cuh"
#include "kernels/common/cuda_check.h"
#include "kernels/common/mma_sync.cuh"
#include "kernels/common/pdl.cuh"
#include "kernels/common/smem_attribute.h"
#include "kernels/moe/mxfp4_mma.cuh"
#include "kernels/moe/routing_device.cuh"

namespace orchid::kernels {
namespace {

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

struct Params {
  RouterRouteArgs a;
  KeyMap km;
  int num_keys;
  int groups, slices, steps_per_slice, total_steps;
  int stride;  // bf16 elements of a staged row
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

__global__ void __launch_bounds__(kThreads) router_route_kernel(Params p) {
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ __align__(16) float s_logits[kGroupTokens * kMaxExperts];
  __shared__ float s_val[kGroupTokens * kMoeMaxTopK];
  __shared__ int s_idx[kGroupTokens * kMoeMaxTopK];
  __shared__ int s_last;
  const RouterRouteArgs& a = p.a;
  const int T = a.num_tokens, H = a.hidden, E = a.num_experts, K = a.top_k;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = int(blockIdx.x) / p.slices, s = int(blockIdx.x) - g * p.slices;
  const int k0 = s * p.steps_per_slice * 16;
  const int steps = min(p.steps_per_slice, p.total_steps - s * p.steps_per_slice);
  const int m_tiles = a.split ? 2 : 1, n_tiles = (E + 7) / 8, cols = n_tiles * 8, stride = p.stride;
  const int pieces = 2 * steps;  // 16-byte pieces of a staged row
  auto* sw = reinterpret_cast<__nv_bfloat16*>(smem);
  auto* sa = sw + size_t(cols) * stride;
  auto* sc = reinterpret_cast<float*>(sa + size_t(m_tiles) * kGroupTokens * stride);
  const int t0 = g * kGroupTokens, tg = min(kGroupTokens, T - t0);

  // 1. The router rows' slice (weights: before the dependency wait), then the tokens' rows (zero past T).
  for (int x = tid; x < cols * pieces; x += kThreads) {
    const int r = x / pieces, c = x - r * pieces;
    const bool ok = r < E;
    cp_async_16(sw + size_t(r) * stride + c * 8, a.router_w + size_t(ok ? r : 0) * H + k0 + c * 8, ok);
  }
  cp_async_commit();
  pdl_wait();
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
    if (steps % 2 != 0) step(steps - 1, c);
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
  float* part = reinterpret_cast<float*>(static_cast<uint8_t*>(a.scratch) + kTicketBytes);
  for (int x = tid; x < m_tiles * tg * E; x += kThreads) {
    const int half = x / (tg * E), rem = x - half * tg * E, tl = rem / E, e = rem - tl * E;
    part[((size_t(s) * 2 + half) * T + t0 + tl) * E + e] = sc[(half * kGroupTokens + tl) * cols + e];
  }
  __syncthreads();
  if (tid == 0) {
    __threadfence();
    s_last = atomicAdd(&tickets[g], 1) == p.slices - 1;
  }
  __syncthreads();
  if (!s_last) return;

  // 3. The group's last CTA: its tokens' logits (slices summed in order), their top-k.
  __threadfence();
  if (tid == 0) tickets[g] = 0;  // every CTA of the group has taken its ticket
  for (int x = tid; x < tg * E; x += kThreads) {
    const int tl = x / E, e = x - tl * E, t = t0 + tl;
    float hi = 0.0f, lo = 0.0f;
    for (int q = 0; q < p.slices; ++q) {
      hi += __ldcg(part + (size_t(q) * 2 * T + t) * E + e);
      if (a.split) lo += __ldcg(part + ((size_t(q) * 2 + 1) * T + t) * E + e);
    }
    float v;
    if (a.split) {
      a.logits[size_t(t) * E + e] = hi;
      a.logits[size_t(T + t) * E + e] = lo;
      v = (hi + lo) + a.router_b[e];
    } else {
      v = hi + a.router_b[e];
      a.logits[size_t(t) * E + e] = v;
    }
    s_logits[tl * E + e] = v == v ? v : -INFINITY;  // NaN (from NaN inputs) ranks as -inf
  }
  __syncthreads();
  topk_rank(s_logits, tg, E, K, s_val, s_idx);
  __syncthreads();
  topk_weights(s_val, s_idx, tg, K, a.topk_idx + size_t(t0) * K, a.topk_w + size_t(t0) * K);
  __syncthreads();
  if (tid == 0) {
    __threadfence();
    s_last = atomicAdd(&tickets[kAllTicket], 1) == p.groups - 1;
  }
  __syncthreads();
  if (!s_last) return;

  // 4. The last group: every token's picks, permuted in this block (the staging area is free).
  __threadfence();
  if (tid == 0) tickets[kAllTicket] = 0;
  const int items = T * K;
  int* s_all = reinterpret_cast<int*>(smem);
  auto& psm = *reinterpret_cast<PermuteSmem<kPermuteWarps>*>(smem + kRouterRouteMaxItems * 4);
  for (int i = tid; i < items; i += kThreads) s_all[i] = __ldcg(a.topk_idx + i);
  __syncthreads();
  permute_small<kPermuteWarps>(s_all, items, K, E, p.km, p.num_keys, a.routing, psm);
}

struct RouterRouteTag {};

// Slices of k: enough CTAs to spread the staging (about 128 at 16 groups), at most 32 k16 steps a slice
// (shared memory); fewer at 128 experts, whose router rows are 4x the bytes a slice. Not tuned by
// measurement yet; ORCHID_ROUTER_SLICES=N asks for N (1-16) to compare.
int choose_slices(int groups, int num_experts, int total_steps) {
  static const int asked = [] {
    const char* v = std::getenv("ORCHID_ROUTER_SLICES");
    return v != nullptr ? std::atoi(v) : 0;
  }();
  int want = asked > 0 ? asked : num_experts > 64 || groups >= 8 ? 8 : 16;
  want = std::min({want, kMaxSlices, total_steps});
  want = std::max(want, (total_steps + kMaxStepsPerSlice - 1) / kMaxStepsPerSlice);
  const int per = (total_steps + want - 1) / want;
  return (total_steps + per - 1) / per;  // no empty slice
}

}  // namespace

bool router_route_fits(int num_tokens, int hidden, int num_experts, int top_k) {
  return num_tokens >= 1 && top_k >= 1 && top_k <= kMoeMaxTopK && top_k <= num_experts &&
         num_experts <= kMaxExperts && int64_t(num_tokens) * top_k <= kRouterRouteMaxItems && hidden > 0 &&
         hidden % 16 == 0 && hidden / 16 <= kMaxSlices * kMaxStepsPerSlice;
}

size_t router_route_scratch_bytes(int max_tokens, int num_experts) {
  const size_t tokens = size_t(std::max(0, std::min(max_tokens, kRouterRouteMaxItems)));
  return kTicketBytes + size_t(kMaxSlices) * 2 * tokens * size_t(num_experts) * 4;
}

void router_route_scratch_init(void* scratch, cudaStream_t stream) {
  ORCHID_CUDA_CHECK(cudaMemsetAsync(scratch, 0, kTicketBytes, stream));
}

void moe_router_route(const RouterRouteArgs& a, cudaStream_t stream) {
  ORCHID_KERNEL_REQUIRE(router_route_fits(a.num_tokens, a.hidden, a.num_experts, a.top_k),
                        "moe_router_route: shapes outside the fused kernel (router_route_fits)");
  ORCHID_KERNEL_REQUIRE(a.x && a.router_w && a.router_b && a.logits && a.topk_idx && a.topk_w &&
                            a.routing.offsets && a.routing.row_token && a.routing.row_expert &&
                            a.routing.slot_row && a.routing.active && a.routing.num_active && a.scratch,
                        "moe_router_route: null pointer");
  auto aligned = [](const void* q, uintptr_t n) { return (reinterpret_cast<uintptr_t>(q) & (n - 1)) == 0; };
  ORCHID_KERNEL_REQUIRE(aligned(a.x, 16) && aligned(a.router_w, 16) && aligned(a.scratch, 16),
                        "moe_router_route: x and the router rows 16-byte aligned, the scratch too");
  Params p;
  p.a = a;
  p.km = key_map(a.num_experts, a.range, &p.num_keys);
  p.groups = (a.num_tokens + kGroupTokens - 1) / kGroupTokens;
  p.total_steps = a.hidden / 16;
  p.slices = choose_slices(p.groups, a.num_experts, p.total_steps);
  p.steps_per_slice = (p.total_steps + p.slices - 1) / p.slices;
  p.stride = p.steps_per_slice * 16 + 8;
  ensure_dynamic_smem<RouterRouteTag>(router_route_kernel, kMaxSmemBytes);
  launch_pdl(router_route_kernel, dim3(unsigned(p.groups * p.slices)), dim3(kThreads),
             smem_bytes(a.num_experts, a.split, p.steps_per_slice), stream, p);
  ORCHID_CUDA_CHECK_LAUNCH();
}

}  // namespace orchid::kernels
