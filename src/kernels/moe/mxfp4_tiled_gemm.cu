// MXFP4 tiled expert GEMM (see mxfp4_tiled_gemm.h).
//
// Napkin math, gpt-oss-20b decode at batch 256 (1024 routed rows, ~32 per expert, all 32 experts used), one
// layer: gate_up 32 * 5760 * 2880 * 17/32 B = 282 MB, down 141 MB -> 101 us at 4.17 TB/s; 24 layers 2.4 ms.
// FLOPs: 2 * 1024 * (5760 + 2880) * 2880 = 51 GFLOP per layer -> 0.10 ms at ~500 TFLOP/s (mma.sync f16).
// Weights are read once per (row tile, token tile): with one token tile per expert (decode) exactly once.
//
// What bounds it is instruction issue (ncu, earlier version: 5.9 cycles between a warp's instructions, DRAM
// at 19%), so the inner loop spends as few instructions per weight as it can. Per MX block and m16 tile a
// warp issues 2 shared loads, 4 ops per bf16x2 register to place the e2m1 bits into bf16 (mxfp4_mma.cuh)
// and 1 multiply by the block's scale, 2 scale loads and 2 IMADs; then per 8 tokens one 16-byte load and 2
// MMAs straight into the fp32 accumulators. bf16 holds e2m1 * 2^(s-127) exactly for every scale the CTA
// meets (the CTA's largest scale sets an exponent bias folded back in the epilogue), and the activations
// are the model's bf16 as they are. No branch inside a chunk: the k tail is zero-filled (its scale index
// clamped into the row), rows past n compute on zeros (the epilogue skips them), the number of token
// n-tiles in use is a template parameter of the loop, and shared addresses are per-lane bases + constants.
//
// Structure: CTA = 8 warps = 128 or 256 weight rows of one expert x tile_tokens token rows. Each warp owns 16
// or 32 weight rows (one or two m16 MMA tiles), dequantizes each weight once and runs it against every token
// n-tile; each activation fragment is loaded once per warp and used by its m-tiles. A cp.async pipeline of
// 3-4 stages holds 4 MX blocks (k 128) of the weight rows and of the token rows each; the MX scales of the
// CTA's rows are loaded once, with the first stage.
//
// NOTES: shared rows are padded so that the fragment loads of a quarter warp hit distinct banks: weight rows
// 16 per MX block + 16 B (rows g = 0..7 at 80- or 144-byte steps cover distinct 16-byte windows of the 128),
// token rows 64 per MX block + 64 B.
#include <cuda_bf16.h>

#include <algorithm>
#include <type_traits>

#include "kernels/common/cuda_check.h"
#include "kernels/common/device_info.h"
#include "kernels/common/pdl.cuh"
#include "kernels/common/smem_attribute.h"
#include "kernels/moe/mxfp4_mma.cuh"
#include "kernels/moe/mxfp4_tiled_gemm.h"
#include "kernels/moe/routing.h"
#include "kernels/moe/swiglu.cuh"

namespace orchid::kernels {
namespace {

using namespace mxfp4_detail;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

// A CTA shape: kMTiles m16 tiles of weight rows per warp, kChunkMx MX blocks (of 32 k) per pipeline stage,
// kStages stages. Rows per CTA = 8 warps x 16 x kMTiles. kMinBlocks: CTAs per SM the registers are capped
// for (2: at most 128 per thread).
template <int kMTiles_, int kChunkMx_, int kStages_, int kMinBlocks_>
struct Shape {
  static constexpr int kMTiles = kMTiles_, kChunkMx = kChunkMx_, kStages = kStages_;
  static constexpr int kMinBlocks = kMinBlocks_;
  static constexpr int kRowsPerWarp = 16 * kMTiles;
  static constexpr int kRowsPerCta = kWarps * kRowsPerWarp;
  static constexpr int kWRowBytes = kChunkMx * 16 + 16;      // one weight row of a stage, padded
  static constexpr int kARowBytes = kChunkMx * 32 * 2 + 64;  // one token row of a stage (bf16), padded
  static constexpr int kWStageBytes = kRowsPerCta * kWRowBytes;
  static constexpr int stage_bytes(int nt) { return kWStageBytes + 8 * nt * kARowBytes; }
  static constexpr int scale_bytes(int k) { return (kRowsPerCta * (k / 32) + 15) / 16 * 16; }
  static constexpr int smem_bytes(int nt, int k) { return kStages * stage_bytes(nt) + scale_bytes(k); }
};

__device__ __forceinline__ uint32_t lds32(const uint8_t* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}

// The factor that turns the bf16 placement (e2m1 * 2^-126) into e2m1 * 2^(s-127-bias): 2^(s-1-bias) in both
// halves of a bf16x2, exponent field s + 126 - bias (in 0..254 for s <= 254, bias = max(0, smax - 128)).
__device__ __forceinline__ uint32_t mx_scale_bf16x2(uint32_t s, uint32_t base) {
  return s * 0x00800080u + base;  // base = (126 - bias) * 0x00800080
}

// Calls run(std::integral_constant<int, V>{}) with V = v (clamped to 1..kMax): the main loop is compiled
// for exactly the token n-tiles in use, with no per-n-tile branch.
template <int kMax, int V = 1, class F>
__device__ __forceinline__ void with_used_tiles(int v, F&& run) {
  if constexpr (V == kMax) {
    run(std::integral_constant<int, V>{});
  } else {
    if (v <= V)
      run(std::integral_constant<int, V>{});
    else
      with_used_tiles<kMax, V + 1>(v, run);
  }
}

template <class Sh, int kNT, bool kSwiglu>
__global__ void __launch_bounds__(kThreads, Sh::kMinBlocks) mxfp4_tiled_kernel(Mxfp4TiledArgs p) {
  pdl_wait();  // programmatic dependent launch (kernels/common/pdl.cuh)
  constexpr int kMTiles = Sh::kMTiles, kChunkMx = Sh::kChunkMx, kStages = Sh::kStages;
  constexpr int kRowsPerWarp = Sh::kRowsPerWarp, kRowsPerCta = Sh::kRowsPerCta;
  constexpr int kWRowBytes = Sh::kWRowBytes, kARowBytes = Sh::kARowBytes, kWStageBytes = Sh::kWStageBytes;
  constexpr int kTokens = 8 * kNT, kStageBytes = Sh::stage_bytes(kNT);
  constexpr int kSegsPerTok = kChunkMx * 4;  // 16-byte segments of a token row per stage
  constexpr int kTokPerThread = (kTokens * kSegsPerTok + kThreads - 1) / kThreads;
  constexpr int kWSegs = kRowsPerCta * kChunkMx;  // 16-byte weight segments per stage
  constexpr int kWPerThread = kWSegs / kThreads;
  static_assert(kWSegs % kThreads == 0, "weight segments divide over the threads");
  extern __shared__ __align__(128) uint8_t smem[];

  const int2 tile = reinterpret_cast<const int2*>(p.tiles)[blockIdx.x];
  const int e = tile.x;
  if (e < 0) return;
  const int rbase = p.offsets[e] + tile.y;  // first permuted row of this tile
  const int m = min(p.offsets[e + 1] - rbase, kTokens);
  const int n = p.n, k = p.k, kmx = k / 32, nchunks = (kmx + kChunkMx - 1) / kChunkMx;
  const int n0 = blockIdx.y * kRowsPerCta;
  const int cta_rows = min(kRowsPerCta, n - n0);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int warp_rows = min(kRowsPerWarp, cta_rows - warp * kRowsPerWarp);  // <= 0: idle warp

  uint8_t* ss = smem + kStages * kStageBytes;  // scales [cta_rows][kmx]
  {
    const uint8_t* sg =
        p.scales + (int64_t(e) * n + n0) * kmx;  // 16-byte aligned: n0 % 128 == 0, n % 16 == 0
    for (int i = tid; i < cta_rows * kmx / 16; i += kThreads) cp_async_16(ss + 16 * i, sg + 16 * i, true);
  }

  // Copy assignments, fixed for the whole loop: weight segment (row, block) pairs and token rows.
  const uint8_t* wsrc[kWPerThread];
  int wdst[kWPerThread], wmx[kWPerThread];
  bool wvalid[kWPerThread];
#pragma unroll
  for (int q = 0; q < kWPerThread; ++q) {
    const int seg = tid + kThreads * q, r = seg / kChunkMx, j = seg % kChunkMx;
    wvalid[q] = r < cta_rows;
    wmx[q] = j;
    wdst[q] = r * kWRowBytes + j * 16;
    wsrc[q] = p.blocks + ((int64_t(e) * n + n0 + r) * kmx + j) * 16;
  }
  const int xseg = tid % kSegsPerTok;
  const __nv_bfloat16* xsrc[kTokPerThread];
  bool xvalid[kTokPerThread];
#pragma unroll
  for (int q = 0; q < kTokPerThread; ++q) {
    const int i = tid / kSegsPerTok + (kThreads / kSegsPerTok) * q;
    xvalid[q] = i < kTokens && i < m;
    int64_t src = 0;
    if (xvalid[q]) src = p.x_rows ? p.x_rows[rbase + i] : rbase + i;
    xsrc[q] = static_cast<const __nv_bfloat16*>(p.x) + src * k + xseg * 8;
  }

  auto issue = [&](int c) {
    if (c < nchunks) {
      uint8_t* st = smem + (c % kStages) * kStageBytes;
#pragma unroll
      for (int q = 0; q < kWPerThread; ++q) {
        const bool v = wvalid[q] && kChunkMx * c + wmx[q] < kmx;
        cp_async_16(st + wdst[q], v ? wsrc[q] + c * (kChunkMx * 16) : p.blocks, v);
      }
      uint8_t* at = st + kWStageBytes;
      const bool col_ok = c * (kChunkMx * 32) + xseg * 8 < k;
#pragma unroll
      for (int q = 0; q < kTokPerThread; ++q) {
        const int i = tid / kSegsPerTok + (kThreads / kSegsPerTok) * q;
        if (i < kTokens) {
          const bool v = xvalid[q] && col_ok;
          cp_async_16(at + i * kARowBytes + xseg * 16, v ? xsrc[q] + c * (kChunkMx * 32) : p.x, v);
        }
      }
    }
    cp_async_commit();  // empty groups too: the wait below counts groups
  };

#pragma unroll
  for (int c = 0; c < kStages - 1; ++c) issue(c);

  float acc[kMTiles][kNT][4];
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) acc[mt][nt][0] = acc[mt][nt][1] = acc[mt][nt][2] = acc[mt][nt][3] = 0.0f;
  const int wr0 = warp * kRowsPerWarp + g;  // this lane's row in m-tile mt: wr0 + 16 mt (+ 8)
  // Rows past n hold zeros in shared memory (their copies are zero-filled); their scale rows are clamped
  // into the CTA's, so their factors stay finite.
  const uint8_t* srow[kMTiles][2];
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
    srow[mt][0] = ss + min(wr0 + 16 * mt, cta_rows - 1) * kmx;
    srow[mt][1] = ss + min(wr0 + 16 * mt + 8, cta_rows - 1) * kmx;
  }
  const int w_lane = wr0 * kWRowBytes + 4 * t, a_lane = g * kARowBytes + 16 * t;
  uint32_t scale_base = 0;
  int bias = 0;

  // The main loop over k, for kV token n-tiles in use (the rest of the tile is empty).
  auto run = [&](auto v) {
    constexpr int kV = decltype(v)::value;
    for (int c = 0; c < nchunks; ++c) {
      cp_async_wait<kStages - 2>();  // chunk c (and the scales) of this thread have landed
      __syncthreads();               // ... and of every thread; chunk c - 1's stage is free again
      if (c == 0 && warp_rows > 0) {
        // The largest scale of the warp's rows: bf16 holds 2^(s-1-bias) for each of them when
        // bias = max(0, smax - 128) (the warp's rows are 16 * kmx-byte aligned: whole uint4s).
        const uint4* rows4 = reinterpret_cast<const uint4*>(ss + warp * kRowsPerWarp * kmx);
        uint32_t mx4 = 0;
        for (int i = lane; i < warp_rows * kmx / 16; i += 32) {
          const uint4 q = rows4[i];
          mx4 = __vmaxu4(mx4, __vmaxu4(__vmaxu4(q.x, q.y), __vmaxu4(q.z, q.w)));
        }
        const uint32_t smax = max(max(mx4 & 0xffu, (mx4 >> 8) & 0xffu), max((mx4 >> 16) & 0xffu, mx4 >> 24));
        bias = max(0, int(__reduce_max_sync(0xffffffffu, smax)) - 128);
        scale_base = uint32_t(126 - bias) * 0x00800080u;
      }
      issue(c + kStages - 1);
      if (warp_rows <= 0) continue;
      const uint8_t* wst = smem + (c % kStages) * kStageBytes + w_lane;
      const uint8_t* ast = smem + (c % kStages) * kStageBytes + kWStageBytes + a_lane;
#pragma unroll
      for (int j = 0; j < kChunkMx; ++j) {
        // Past k the weights and tokens are zero-filled; the scale index stays in the row.
        const int mx = min(kChunkMx * c + j, kmx - 1);
        uint32_t a[kMTiles][8];
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
          const uint32_t wa = lds32(wst + (16 * mt) * kWRowBytes + j * 16);
          const uint32_t wb = lds32(wst + (16 * mt + 8) * kWRowBytes + j * 16);
          const uint32_t sa = mx_scale_bf16x2(srow[mt][0][mx], scale_base);
          const uint32_t sb = mx_scale_bf16x2(srow[mt][1][mx], scale_base);
          a[mt][0] = mul_bf16x2(e2m1_pair_to_bf16x2<0>(wa), sa);
          a[mt][1] = mul_bf16x2(e2m1_pair_to_bf16x2<0>(wb), sb);
          a[mt][2] = mul_bf16x2(e2m1_pair_to_bf16x2<1>(wa), sa);
          a[mt][3] = mul_bf16x2(e2m1_pair_to_bf16x2<1>(wb), sb);
          a[mt][4] = mul_bf16x2(e2m1_pair_to_bf16x2<2>(wa), sa);
          a[mt][5] = mul_bf16x2(e2m1_pair_to_bf16x2<2>(wb), sb);
          a[mt][6] = mul_bf16x2(e2m1_pair_to_bf16x2<3>(wa), sa);
          a[mt][7] = mul_bf16x2(e2m1_pair_to_bf16x2<3>(wb), sb);
        }
#pragma unroll
        for (int nt = 0; nt < kV; ++nt) {
          const uint4 xb = *reinterpret_cast<const uint4*>(ast + nt * 8 * kARowBytes + j * 64);
#pragma unroll
          for (int mt = 0; mt < kMTiles; ++mt) {
            // k16 step 0: elements {0,4},{1,5} of each 8-group; step 1: {2,6},{3,7}
            mma_m16n8k16_bf16(acc[mt][nt], a[mt][0], a[mt][1], a[mt][2], a[mt][3], xb.x, xb.y);
            mma_m16n8k16_bf16(acc[mt][nt], a[mt][4], a[mt][5], a[mt][6], a[mt][7], xb.z, xb.w);
          }
        }
      }
    }
  };
  const int valid_nt = (m + 7) / 8;  // n-tiles that hold a token row (1..kNT)
  with_used_tiles<kNT>(valid_nt, run);
  cp_async_wait<0>();
  pdl_launch_dependents();  // only the epilogue is left (kernels/common/pdl.cuh)
  if (warp_rows <= 0) return;

  const float unbias = __uint_as_float(uint32_t(127 + bias) << 23);  // 2^bias
  const int valid_mt = warp_rows / 16;
  if constexpr (!kSwiglu) {
    __nv_bfloat16* y = static_cast<__nv_bfloat16*>(p.y);
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
      if (mt >= valid_mt) break;
      const int row = n0 + wr0 + 16 * mt;  // and row + 8
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const int tok = nt * 8 + 2 * t + (q & 1);
          if (tok < m)
            y[(int64_t(rbase) + tok) * n + row + (q >> 1) * 8] = __float2bfloat16_rn(acc[mt][nt][q] * unbias);
        }
      }
    }
  } else {
    // Row g's partner row g^1 lives in lane ^ 4; even-g lanes hold a gate row and write z[i], i = row / 2,
    // at its MX-order position.
    const __nv_bfloat16* b1 = static_cast<const __nv_bfloat16*>(p.swiglu_bias) + int64_t(e) * n;
    __nv_bfloat16* z = static_cast<__nv_bfloat16*>(p.y);
    const int zn = n / 2;
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
      if (mt >= valid_mt) break;  // warp-uniform: the shuffles below see every lane
      const int row = n0 + wr0 + 16 * mt;
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const float v = acc[mt][nt][q] * unbias;
          const float other = __shfl_xor_sync(0xffffffffu, v, 4);
          const int tok = nt * 8 + 2 * t + (q & 1);
          const int r = row + (q >> 1) * 8;
          if ((g & 1) == 0 && tok < m) {
            const float gate = v + __bfloat162float(b1[r]);
            const float up = other + __bfloat162float(b1[r + 1]);
            const int i = r / 2;
            z[(int64_t(rbase) + tok) * zn + (i & ~7) + mx_order_pos(i & 7)] =
                __float2bfloat16_rn(swiglu_fp32(gate, up, p.swiglu.limit, p.swiglu.alpha));
          }
        }
      }
    }
  }
}

// One block: per-expert tile counts, an exclusive scan in shared memory, then every thread fills entries
// (binary search for the expert of each entry).
__global__ void __launch_bounds__(kMoeMaxExperts)
    tiled_plan_kernel(const int* __restrict__ offsets, int E, int tile_tokens, int2* __restrict__ tiles,
                      int max_tiles) {
  pdl_wait();  // programmatic dependent launch (kernels/common/pdl.cuh)
  __shared__ int start[kMoeMaxExperts + 1];
  const int e = threadIdx.x;
  const int cnt = e < E ? (offsets[e + 1] - offsets[e] + tile_tokens - 1) / tile_tokens : 0;
  start[e + 1] = cnt;
  if (e == 0) start[0] = 0;
  __syncthreads();
  for (int d = 1; d < kMoeMaxExperts; d *= 2) {  // inclusive scan of start[1..]
    const int v = e >= d ? start[e + 1 - d] : 0;
    __syncthreads();
    start[e + 1] += v;
    __syncthreads();
  }
  const int total = start[E];
  for (int i = e; i < max_tiles; i += blockDim.x) {
    if (i >= total) {
      tiles[i] = make_int2(-1, 0);
      continue;
    }
    int lo = 0, hi = E - 1;  // the last expert with start[x] <= i
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (start[mid] <= i)
        lo = mid;
      else
        hi = mid - 1;
    }
    tiles[i] = make_int2(lo, (i - start[lo]) * tile_tokens);
  }
}

__global__ void activation_mx_kernel(const uint4* __restrict__ x, int64_t groups, uint4* __restrict__ out) {
  pdl_wait();  // programmatic dependent launch (kernels/common/pdl.cuh)
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < groups;
       i += int64_t(gridDim.x) * blockDim.x) {
    out[i] = bf16x8_to_mx_order(x[i]);
  }
}

template <class Sh, int kNT, bool kSwiglu>
struct TiledKernelTag {};

template <class Sh, int kNT, bool kSwiglu>
void launch(const Mxfp4TiledArgs& p, cudaStream_t stream) {
  const int bytes = Sh::smem_bytes(kNT, p.k);
  ORCHID_KERNEL_REQUIRE(bytes <= device_info().max_smem_per_block_optin,
                        "mxfp4_tiled_gemm: k too large for the shared scale tile");
  auto kernel = mxfp4_tiled_kernel<Sh, kNT, kSwiglu>;
  // Raised once per device to the opt-in limit (the launch's own size decides the occupancy).
  ensure_dynamic_smem<TiledKernelTag<Sh, kNT, kSwiglu>>(kernel, device_info().max_smem_per_block_optin);
  const dim3 grid(unsigned(p.max_tiles), unsigned((p.n + Sh::kRowsPerCta - 1) / Sh::kRowsPerCta));
  launch_pdl(kernel, grid, dim3(kThreads), size_t(bytes), stream, p);
}

template <class Sh, bool kSwiglu>
void dispatch_tokens(const Mxfp4TiledArgs& p, cudaStream_t stream) {
  switch (p.tile_tokens) {
    case 16:
      return launch<Sh, 2, kSwiglu>(p, stream);
    case 32:
      return launch<Sh, 4, kSwiglu>(p, stream);
    case 48:
      return launch<Sh, 6, kSwiglu>(p, stream);
    case 64:
      return launch<Sh, 8, kSwiglu>(p, stream);
    default:
      ORCHID_KERNEL_REQUIRE(false, "mxfp4_tiled_gemm: tile_tokens must be 16, 32, 48 or 64");
  }
}

template <bool kSwiglu>
void dispatch(const Mxfp4TiledArgs& p, cudaStream_t stream) {
  switch (p.cta_shape) {
    case Mxfp4TiledShape::kRows128:
      return dispatch_tokens<Shape<1, 4, 4, 2>, kSwiglu>(p, stream);
    case Mxfp4TiledShape::kRows256:
      return dispatch_tokens<Shape<2, 4, 3, 2>, kSwiglu>(p, stream);
  }
  ORCHID_KERNEL_REQUIRE(false, "mxfp4_tiled_gemm: unknown CTA shape");
}

}  // namespace

int mxfp4_tiled_max_tiles(int rows, int num_experts, int tile_tokens) {
  // sum_e ceil(m_e / tt) <= floor(rows / tt) + (experts with rows)
  return rows / tile_tokens + std::min(num_experts, rows);
}

void mxfp4_tiled_plan(const int* offsets, int num_experts, int tile_tokens, int* tiles, int max_tiles,
                      cudaStream_t stream) {
  ORCHID_KERNEL_REQUIRE(num_experts >= 1 && num_experts <= kMoeMaxExperts,
                        "mxfp4_tiled_plan: expert count out of range");
  ORCHID_KERNEL_REQUIRE(tile_tokens > 0 && offsets && tiles, "mxfp4_tiled_plan: bad arguments");
  if (max_tiles <= 0) return;
  launch_pdl(tiled_plan_kernel, dim3(1), dim3(kMoeMaxExperts), 0, stream, offsets, num_experts, tile_tokens,
             reinterpret_cast<int2*>(tiles), max_tiles);
  ORCHID_CUDA_CHECK_LAUNCH();
}

void mxfp4_activation_mx(const void* x, int rows, int k, void* out, cudaStream_t stream) {
  ORCHID_KERNEL_REQUIRE(k % 8 == 0, "mxfp4_activation_mx: k must be a multiple of 8");
  const int64_t groups = int64_t(rows) * (k / 8);
  if (groups == 0) return;
  const int blocks = int(std::min<int64_t>((groups + 255) / 256, 4 * device_info().sm_count));
  launch_pdl(activation_mx_kernel, dim3(blocks), dim3(256), 0, stream, static_cast<const uint4*>(x), groups,
             static_cast<uint4*>(out));
  ORCHID_CUDA_CHECK_LAUNCH();
}

void mxfp4_tiled_gemm(const Mxfp4TiledArgs& p, cudaStream_t stream) {
  ORCHID_KERNEL_REQUIRE(p.n > 0 && p.n % 16 == 0, "mxfp4_tiled_gemm: n must be a positive multiple of 16");
  ORCHID_KERNEL_REQUIRE(p.k > 0 && p.k % 32 == 0, "mxfp4_tiled_gemm: k must be a positive multiple of 32");
  ORCHID_KERNEL_REQUIRE(p.offsets && p.tiles && p.blocks && p.scales && p.x && p.y,
                        "mxfp4_tiled_gemm: null pointer");
  ORCHID_KERNEL_REQUIRE((reinterpret_cast<uintptr_t>(p.x) | reinterpret_cast<uintptr_t>(p.blocks) |
                         reinterpret_cast<uintptr_t>(p.scales)) %
                                16 ==
                            0,
                        "mxfp4_tiled_gemm: x, blocks and scales must be 16-byte aligned");
  if (p.max_tiles <= 0) return;
  if (p.swiglu_bias)
    dispatch<true>(p, stream);
  else
    dispatch<false>(p, stream);
}

}  // namespace orchid::kernels
