// MXFP4 tiled expert GEMM (see mxfp4_tiled_gemm.h).
//
// Napkin math, gpt-oss-20b decode at batch 256 (1024 routed rows, ~32 per expert, all 32 experts used), one
// layer: gate_up 32 * 5760 * 2880 * 17/32 B = 282 MB, down 141 MB -> 101 us at 4.17 TB/s; 24 layers 2.4 ms.
// FLOPs: 2 * 1024 * (5760 + 2880) * 2880 = 51 GFLOP per layer -> 0.10 ms at ~500 TFLOP/s (mma.sync f16).
// Weights are read once per (row tile, token tile): with one token tile per expert (decode) exactly once.
//
// What bounds it is instruction issue (ncu at 64 tokens, the version with all threads copying through
// cp.async: 91 M warp instructions for one gate_up call, 0.67 issued per scheduler and cycle, DRAM at 38%;
// the same kernel with the weight copies left out was only 15% faster, so the copies were not the wall but
// their ~70 instructions per thread and stage were a quarter of the issue). So the copies belong to one
// producer warp and the consumers spend as few instructions per weight as they can. Per MX block and m16
// tile a consumer warp issues 2 shared loads, 4 ops per bf16x2 register to place the e2m1 bits into bf16
// (mxfp4_mma.cuh) and 1 multiply by the block's scale, 2 scale loads and 2 IMADs; then per 8 tokens one
// 16-byte load and 2 MMAs straight into the fp32 accumulators. bf16 holds e2m1 * 2^(s-127) exactly for
// every scale the warp meets (its largest scale sets an exponent bias folded back in the epilogue), and the
// activations are the model's bf16 as they are. The number of token n-tiles in use is a template parameter
// of the loop and shared addresses are per-lane bases + constants.
//
// Structure: CTA = 8 consumer warps = 128 or 256 weight rows of one expert x tile_tokens token rows, plus a
// producer warp. Each consumer warp owns 16 or 32 weight rows (one or two m16 MMA tiles), dequantizes each
// weight once and runs it against every token n-tile; each activation fragment is loaded once per warp and
// used by its m-tiles. The producer fills a ring of 2-8 stages (as deep as two CTAs per SM allow) of 4 MX
// blocks (k 128) of the weight rows and of the token rows, completed on the stage's mbarrier; the consumers
// release a stage on a second mbarrier. The weights of a stage are one 2-D tensor copy (box 64 bytes x the
// CTA's rows): one bulk copy per 64-byte row was 4.5x slower, the copy engine's cost is per request. The
// token rows are one tensor copy per MX block when x holds the permuted rows contiguously (x_row_count;
// the MoE layer gathers them in mxfp4_activation_mx), else one bulk copy per row. The MX scales of the
// CTA's rows come once, by one bulk copy. Nothing is zero-filled: token rows past the tile's rows and rows
// past n compute on whatever the stage holds and the epilogue drops them (an MMA's output columns and rows
// are independent), and the k tail of the last stage is skipped.
//
// NOTES: the tensor copies use the 64-byte swizzle (the 16-byte column c of a 64-byte row r lands at
// c ^ ((r >> 1) & 3)), so that the fragment loads of a quarter warp hit distinct banks; the bulk-copied
// token rows are padded to 64 per MX block + 64 B for the same reason.
#include <cuda.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <string>
#include <type_traits>

#include "kernels/common/bulk_copy.cuh"
#include "kernels/common/cuda_check.h"
#include "kernels/common/device_info.h"
#include "kernels/common/pdl.cuh"
#include "kernels/common/smem_attribute.h"
#include "kernels/common/tensor_map.h"
#include "kernels/moe/mxfp4_mma.cuh"
#include "kernels/moe/mxfp4_tiled_gemm.h"
#include "kernels/moe/routing.h"
#include "kernels/moe/swiglu.cuh"

namespace orchid::kernels {
namespace {

using namespace mxfp4_detail;

constexpr int kConsumerWarps = 8;                    // dequantize and multiply
constexpr int kThreads = 32 * (kConsumerWarps + 1);  // + one producer warp issuing the bulk copies
constexpr int kMaxStages = 8;
// Shared memory one CTA may take so that two fit on an SM (228 KB less the per-CTA reserve).
constexpr int kSmemBudget = 112 * 1024;
// Scale bytes the stage count is planned for (k = 2880, the gpt-oss experts); a larger k gets fewer CTAs
// per SM, not a failure.
constexpr int kPlannedKmx = 90;

// A CTA shape: kMTiles m16 tiles of weight rows per consumer warp, kChunkMx MX blocks (of 32 k) per ring
// stage. Rows per CTA = 8 warps x 16 x kMTiles. kMinBlocks: CTAs per SM the registers are capped for. The
// ring is as deep as two CTAs per SM allow for the token tile (2..8 stages).
template <int kMTiles_, int kChunkMx_, int kMinBlocks_>
struct Shape {
  static constexpr int kMTiles = kMTiles_, kChunkMx = kChunkMx_;
  static constexpr int kMinBlocks = kMinBlocks_;
  static constexpr int kRowsPerWarp = 16 * kMTiles;
  static constexpr int kRowsPerCta = kConsumerWarps * kRowsPerWarp;
  static_assert(kChunkMx * 16 == 64, "a weight row of a stage is one 64-byte swizzle span");
  static constexpr int kWRowBytes = kChunkMx * 16;           // one weight row of a stage (swizzled)
  static constexpr int kARowBytes = kChunkMx * 32 * 2 + 64;  // one token row of a stage (bf16), padded
  static constexpr int kWStageBytes = kRowsPerCta * kWRowBytes;
  // Stages start 1 KB-aligned: the tensor copy's 64-byte swizzle is a function of the shared address.
  static constexpr int stage_bytes(int nt) {
    return (kWStageBytes + 8 * nt * kARowBytes + 1023) / 1024 * 1024;
  }
  static constexpr int scale_bytes(int k) { return (kRowsPerCta * (k / 32) + 15) / 16 * 16; }
  static constexpr int stages(int nt) {
    const int fit = (kSmemBudget - 1024 - kRowsPerCta * kPlannedKmx - 256) / stage_bytes(nt);
    return fit < 2 ? 2 : fit > kMaxStages ? kMaxStages : fit;
  }
  // The ring, the scales, then the mbarriers (dynamic too: a static part would lower the opt-in limit
  // the launch raises the dynamic size to).
  static constexpr int barrier_offset(int nt, int k) { return stages(nt) * stage_bytes(nt) + scale_bytes(k); }
  // + up to 1 KB to align the ring
  static constexpr int smem_bytes(int nt, int k) {
    return 1024 + barrier_offset(nt, k) + (2 * stages(nt) + 1) * 8;
  }
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

// kTokenBoxes: the token rows are contiguous (x_rows null) and come as one tensor copy per MX block of a
// stage (box 64 bytes x the tile's rows, 64-byte swizzled); otherwise one bulk copy per token row, padded.
template <class Sh, int kNT, bool kSwiglu, bool kTokenBoxes>
__global__ void __launch_bounds__(kThreads, Sh::kMinBlocks)
    mxfp4_tiled_kernel(Mxfp4TiledArgs p, const __grid_constant__ CUtensorMap wmap,
                       const __grid_constant__ CUtensorMap xmap) {
  pdl_wait();  // programmatic dependent launch (kernels/common/pdl.cuh)
  constexpr int kMTiles = Sh::kMTiles, kChunkMx = Sh::kChunkMx, kStages = Sh::stages(kNT);
  constexpr int kRowsPerWarp = Sh::kRowsPerWarp, kRowsPerCta = Sh::kRowsPerCta;
  constexpr int kWRowBytes = Sh::kWRowBytes, kARowBytes = Sh::kARowBytes, kWStageBytes = Sh::kWStageBytes;
  constexpr int kTokens = 8 * kNT, kStageBytes = Sh::stage_bytes(kNT);
  extern __shared__ __align__(128) uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);

  const int2 tile = reinterpret_cast<const int2*>(p.tiles)[blockIdx.x];
  const int e = tile.x;
  if (e < 0) return;
  const int rbase = p.offsets[e] + tile.y;  // first permuted row of this tile
  const int m = min(p.offsets[e + 1] - rbase, kTokens);
  const int n = p.n, k = p.k, kmx = k / 32;
  const int nfull = kmx / kChunkMx, tail = kmx % kChunkMx, nchunks = nfull + (tail > 0);
  const int n0 = blockIdx.y * kRowsPerCta;
  const int cta_rows = min(kRowsPerCta, n - n0);  // a multiple of 16
  const int busy_warps = (cta_rows + kRowsPerWarp - 1) / kRowsPerWarp;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  uint8_t* ss = smem + kStages * kStageBytes;  // scales [cta_rows][kmx]
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + Sh::barrier_offset(kNT, k));
  uint64_t* empty = full + kStages;
  uint64_t& scales_ready = empty[kStages];

  if (tid == 0) {
    for (int i = 0; i < kStages; ++i) {
      mbar_init(&full[i], 1);
      mbar_init(&empty[i], busy_warps);
    }
    mbar_init(&scales_ready, 1);
    mbar_init_fence();
  }
  __syncthreads();

  if (warp == kConsumerWarps) {
    // Producer: the CTA's scales once, then per stage one bulk copy per weight row (the stage's MX blocks
    // of that row, contiguous in the checkpoint layout) and one per token row (gathered through x_rows).
    // Token rows past m and the k tail of the last stage are not copied: the consumers never read them
    // into a result (rows past m are dropped by the epilogue, the k tail is skipped).
    if (lane == 0) {
      const uint32_t bytes = uint32_t(cta_rows * kmx);  // 16 * kmx * (cta_rows / 16)
      mbar_arrive_expect_tx(&scales_ready, bytes);
      bulk_copy_g2s(ss, p.scales + (int64_t(e) * n + n0) * kmx, bytes, &scales_ready);
    }
    const int wrow0 = e * n + n0;  // the CTA's first row in the weight tensor map
    constexpr int kTokPerLane = (kTokens + 31) / 32;
    const __nv_bfloat16* xsrc[kTokPerLane];
#pragma unroll
    for (int q = 0; q < kTokPerLane; ++q) {
      const int i = lane + 32 * q;
      int64_t src = 0;
      if (i < m) src = p.x_rows ? p.x_rows[rbase + i] : rbase + i;
      xsrc[q] = static_cast<const __nv_bfloat16*>(p.x) + src * k;
    }
    for (int c = 0; c < nchunks; ++c) {
      const int st = c % kStages;
      if (c >= kStages) mbar_wait(&empty[st], ((c / kStages) - 1) & 1);
      const int blocks = c < nfull ? kChunkMx : tail;
      const uint32_t abytes = 64 * blocks;
      uint8_t* stage = smem + st * kStageBytes;
      if constexpr (kTokenBoxes) {
        if (lane == 0) {
          // Whole boxes count, the zero fill past k or past the last rows included.
          mbar_arrive_expect_tx(&full[st], kWStageBytes + blocks * (kTokens * 64));
          tensor_copy_2d(stage, &wmap, c * kChunkMx * 16, wrow0, &full[st]);
          for (int j = 0; j < blocks; ++j)
            tensor_copy_2d(stage + kWStageBytes + j * (kTokens * 64), &xmap, (c * kChunkMx + j) * 64, rbase,
                           &full[st]);
        }
        continue;
      }
      if (lane == 0) {
        // The whole box counts, the zero fill past k or past the last expert's rows included.
        mbar_arrive_expect_tx(&full[st], kWStageBytes + m * abytes);
        tensor_copy_2d(stage, &wmap, c * kChunkMx * 16, wrow0, &full[st]);
      }
      __syncwarp();
#pragma unroll
      for (int q = 0; q < kTokPerLane; ++q) {
        const int i = lane + 32 * q;
        if (i < m)
          bulk_copy_g2s(stage + kWStageBytes + i * kARowBytes, xsrc[q] + c * (kChunkMx * 32), abytes,
                        &full[st]);
      }
    }
    return;  // an exited thread counts as having let the next kernel start (pdl.cuh)
  }
  if (warp >= busy_warps) return;
  const int warp_rows = min(kRowsPerWarp, cta_rows - warp * kRowsPerWarp);  // whole m16 tiles

  float acc[kMTiles][kNT][4];
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) acc[mt][nt][0] = acc[mt][nt][1] = acc[mt][nt][2] = acc[mt][nt][3] = 0.0f;
  const int wr0 = warp * kRowsPerWarp + g;  // this lane's row in m-tile mt: wr0 + 16 mt (+ 8)
  // A warp's last m-tile may lie past the CTA's rows (its shared rows are never written): its scale rows
  // are clamped into the CTA's, so the factors stay finite, and the epilogue drops its results.
  const uint8_t* srow[kMTiles][2];
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
    srow[mt][0] = ss + min(wr0 + 16 * mt, cta_rows - 1) * kmx;
    srow[mt][1] = ss + min(wr0 + 16 * mt + 8, cta_rows - 1) * kmx;
  }
  // 64-byte swizzle: the 16-byte column j of row r sits at column j ^ ((r >> 1) & 3); the lane's rows
  // differ by multiples of 8, so they share (g >> 1) & 3. The 8 rows g then hit distinct bank groups.
  const int wsw = (g >> 1) & 3;
  const int w_lane = wr0 * kWRowBytes + 4 * t;
  // Token rows: padded rows (kARowBytes, MX block j at 64 j), or per MX block j a swizzled box of 64-byte
  // rows (row 8 nt + g at 64 (8 nt + g), its 16-byte column t at t ^ wsw: a quarter warp's two rows fall in
  // the two halves of the banks, its four columns in distinct quarters).
  constexpr int kANtStride = kTokenBoxes ? 8 * 64 : 8 * kARowBytes;
  constexpr int kABlockStride = kTokenBoxes ? kTokens * 64 : 64;
  const int a_lane = kTokenBoxes ? g * 64 + 16 * (t ^ wsw) : g * kARowBytes + 16 * t;

  // The largest scale of the warp's rows: bf16 holds 2^(s-1-bias) for each of them when
  // bias = max(0, smax - 128) (the warp's rows are 16 * kmx-byte aligned: whole uint4s).
  mbar_wait(&scales_ready, 0);
  int bias;
  {
    const uint4* rows4 = reinterpret_cast<const uint4*>(ss + warp * kRowsPerWarp * kmx);
    uint32_t mx4 = 0;
    for (int i = lane; i < warp_rows * kmx / 16; i += 32) {
      const uint4 q = rows4[i];
      mx4 = __vmaxu4(mx4, __vmaxu4(__vmaxu4(q.x, q.y), __vmaxu4(q.z, q.w)));
    }
    const uint32_t smax = max(max(mx4 & 0xffu, (mx4 >> 8) & 0xffu), max((mx4 >> 16) & 0xffu, mx4 >> 24));
    bias = max(0, int(__reduce_max_sync(0xffffffffu, smax)) - 128);
  }
  const uint32_t scale_base = uint32_t(126 - bias) * 0x00800080u;

  // The main loop over k, for kV token n-tiles in use (the rest of the tile is never read into a result).
  auto run = [&](auto v) {
    constexpr int kV = decltype(v)::value;
    // One MX block (32 k) of the stage at wst / ast.
    auto block = [&](const uint8_t* wst, const uint8_t* ast, int j, int mx) {
      uint32_t a[kMTiles][8];
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        const uint32_t wa = lds32(wst + (16 * mt) * kWRowBytes + (j ^ wsw) * 16);
        const uint32_t wb = lds32(wst + (16 * mt + 8) * kWRowBytes + (j ^ wsw) * 16);
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
        const uint4 xb = *reinterpret_cast<const uint4*>(ast + nt * kANtStride + j * kABlockStride);
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
          // k16 step 0: elements {0,4},{1,5} of each 8-group; step 1: {2,6},{3,7}
          mma_m16n8k16_bf16(acc[mt][nt], a[mt][0], a[mt][1], a[mt][2], a[mt][3], xb.x, xb.y);
          mma_m16n8k16_bf16(acc[mt][nt], a[mt][4], a[mt][5], a[mt][6], a[mt][7], xb.z, xb.w);
        }
      }
    };
    for (int c = 0; c < nchunks; ++c) {
      const int st = c % kStages;
      mbar_wait(&full[st], (c / kStages) & 1);
      const uint8_t* wst = smem + st * kStageBytes + w_lane;
      const uint8_t* ast = smem + st * kStageBytes + kWStageBytes + a_lane;
      if (c < nfull) {
#pragma unroll
        for (int j = 0; j < kChunkMx; ++j) block(wst, ast, j, kChunkMx * c + j);
      } else {
        for (int j = 0; j < tail; ++j) block(wst, ast, j, kChunkMx * c + j);
      }
      __syncwarp();
      if (lane == 0) mbar_arrive(&empty[st]);
    }
  };
  const int valid_nt = (m + 7) / 8;  // n-tiles that hold a token row (1..kNT)
  with_used_tiles<kNT>(valid_nt, run);
  pdl_launch_dependents();  // only the epilogue is left (kernels/common/pdl.cuh)

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

__global__ void activation_mx_kernel(const uint4* __restrict__ x, const int* __restrict__ row_map,
                                     int groups_per_row, int64_t groups, uint4* __restrict__ out) {
  pdl_wait();  // programmatic dependent launch (kernels/common/pdl.cuh)
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < groups;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t src = i;
    if (row_map) {
      const int64_t r = i / groups_per_row;
      src = int64_t(row_map[r]) * groups_per_row + (i - r * groups_per_row);
    }
    out[i] = bf16x8_to_mx_order(x[src]);
  }
}

template <class Sh, int kNT, bool kSwiglu, bool kTokenBoxes>
struct TiledKernelTag {};

// A row-major byte matrix [rows][row_bytes] as a 2-D tensor map with boxes of 64 bytes x box_rows, 64-byte
// swizzled. Encoded per launch on the host (a graph captures it by value with the kernel's parameters).
CUtensorMap byte_tensor_map(const void* base, uint64_t rows, uint64_t row_bytes, int box_rows,
                            const char* what) {
  const uint64_t dims[2] = {row_bytes, rows};
  const uint64_t strides[1] = {row_bytes};
  const uint32_t box[2] = {64, uint32_t(box_rows)};
  return encode_tensor_map(CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, base, dims, strides, box,
                           CU_TENSOR_MAP_SWIZZLE_64B, (std::string("mxfp4_tiled_gemm: ") + what).c_str());
}

template <class Sh, int kNT, bool kSwiglu, bool kTokenBoxes>
void launch_shape(const Mxfp4TiledArgs& p, cudaStream_t stream) {
  const int bytes = Sh::smem_bytes(kNT, p.k);
  ORCHID_KERNEL_REQUIRE(bytes <= device_info().max_smem_per_block_optin,
                        "mxfp4_tiled_gemm: k too large for the shared scale tile");
  auto kernel = mxfp4_tiled_kernel<Sh, kNT, kSwiglu, kTokenBoxes>;
  // Raised once per device to the opt-in limit (the launch's own size decides the occupancy).
  ensure_dynamic_smem<TiledKernelTag<Sh, kNT, kSwiglu, kTokenBoxes>>(kernel,
                                                                     device_info().max_smem_per_block_optin);
  const dim3 grid(unsigned(p.max_tiles), unsigned((p.n + Sh::kRowsPerCta - 1) / Sh::kRowsPerCta));
  // The expert blocks as [E * n rows][k / 32 * 16 bytes]: one box = one stage's weights (4 MX blocks of
  // each of the CTA's rows); the tokens as [x_row_count][2 k bytes], one box = one MX block of the tile.
  const CUtensorMap wmap = byte_tensor_map(p.blocks, uint64_t(p.num_experts) * uint64_t(p.n),
                                           uint64_t(p.k / 32 * 16), Sh::kRowsPerCta, "the expert blocks");
  const CUtensorMap xmap = kTokenBoxes ? byte_tensor_map(p.x, uint64_t(p.x_row_count), uint64_t(p.k) * 2,
                                                         8 * kNT, "the token rows")
                                       : wmap;
  launch_pdl(kernel, grid, dim3(kThreads), size_t(bytes), stream, p, wmap, xmap);
}

template <class Sh, int kNT, bool kSwiglu>
void launch(const Mxfp4TiledArgs& p, cudaStream_t stream) {
  if (p.x_rows == nullptr && p.x_row_count > 0)
    launch_shape<Sh, kNT, kSwiglu, true>(p, stream);
  else
    launch_shape<Sh, kNT, kSwiglu, false>(p, stream);
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
      return dispatch_tokens<Shape<1, 4, 2>, kSwiglu>(p, stream);
    case Mxfp4TiledShape::kRows256:
      return dispatch_tokens<Shape<2, 4, 2>, kSwiglu>(p, stream);
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

void mxfp4_activation_mx(const void* x, int rows, int k, void* out, cudaStream_t stream, const int* row_map) {
  ORCHID_KERNEL_REQUIRE(k % 8 == 0, "mxfp4_activation_mx: k must be a multiple of 8");
  const int64_t groups = int64_t(rows) * (k / 8);
  if (groups == 0) return;
  const int blocks = int(std::min<int64_t>((groups + 255) / 256, 4 * device_info().sm_count));
  launch_pdl(activation_mx_kernel, dim3(blocks), dim3(256), 0, stream, static_cast<const uint4*>(x), row_map,
             k / 8, groups, static_cast<uint4*>(out));
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
