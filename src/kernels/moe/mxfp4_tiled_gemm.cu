// MXFP4 tiled expert GEMM (see mxfp4_tiled_gemm.h).
//
// Napkin math, gpt-oss-20b decode at batch 256 (1024 routed rows, ~32 per expert, all 32 experts used), one
// layer: gate_up 32 * 5760 * 2880 * 17/32 B = 282 MB, down 141 MB -> 101 us at 4.17 TB/s; 24 layers 2.4 ms.
// FLOPs: 2 * 1024 * (5760 + 2880) * 2880 = 51 GFLOP per layer -> 0.10 ms at ~500 TFLOP/s (mma.sync f16).
// Weights are read once per (row tile, token tile): with one token tile per expert (decode) exactly once.
//
// What bounds it is instruction issue (ncu, 2026-12-04: 60-70% of issue slots used at 4 warps per scheduler,
// DRAM at 45-60%, the tensor pipe at 18-37%; the top stalls are fixed-latency dependencies and warps not
// selected). So the consumers place each weight into bf16 once (per MX block and m16 tile a consumer warp
// issues 2 shared loads, 4 ops per bf16x2 register to place the e2m1 bits (mxfp4_mma.cuh), 1 multiply by the
// block's scale, 2 scale loads and 2 IMADs) and spend as few instructions as they can on the MMAs: for tiles
// of up to 16 token rows one ldmatrix and 2 mma.sync per 8 tokens, above that wgmma (m64nNk16, A in
// registers, the tile's token rows as B from shared memory: one instruction per warp and k16 step for every
// token of the tile, asynchronous, so the next block is dequantized while the tensor cores run). wgmma's
// warpgroup-wide fence / commit / wait per block cost more than the mma.sync issue they save at 8-16 rows
// (6-9% slower there), and win from 24 (16% at 48 rows, 17% at 64). bf16 holds e2m1 * 2^(s-127) exactly for
// every scale the warp meets (its largest scale sets an exponent bias folded back in the epilogue), and the
// activations are the model's bf16 as they are.
//
// Structure: CTA = 8 consumer warps (2 warpgroups) = 128 or 256 weight rows of one expert x tile_tokens
// token rows, plus a producer warp. Each consumer warp owns 16 or 32 weight rows (one or two m16 tiles); the
// m16 tile mt of the four warps of a warpgroup forms the 64 rows of its wgmma mt, so a warp's accumulators
// hold exactly its own rows (the wgmma D layout per warp is the mma.sync m16n8 one, so both MMA paths share
// the accumulators and the epilogue). The number of token rows the MMAs cover is the tile's rows rounded up
// to 8 (a template parameter of the loop). The
// producer fills a ring of 2-8 stages (as deep as the CTAs an SM holds allow: two, or one for 128-token
// tiles) of 4 MX blocks (k 128): the
// weights of a stage as one tensor copy (box 64 bytes x the CTA's rows, or with the blocks repacked at load
// the CTA's 16-row groups' kilobyte chunks: one bulk copy per 64-byte row was 4.5x slower, the copy engine's
// cost is per request), the token rows as one tensor copy per MX block (box
// 64 bytes x the tile, the layer gathers the permuted rows in mxfp4_tiled_activation), the CTA's MX scales
// once. Consumers release a stage once nothing reads it any more: at its end on the mma.sync path, after
// the first block of the next stage on the wgmma path (whose last group may still be reading its tokens).
// Nothing is zero-filled: token rows past the tile's rows and weight rows past n compute on whatever the
// stage holds and the epilogue drops them (an MMA's output rows and columns are independent), and the k tail
// of the last stage is skipped.
//
// NOTES: the tensor copies use the 64-byte swizzle (the 16-byte column c of a 64-byte row r lands at
// c ^ ((r >> 1) & 3)). For the weights it keeps a quarter warp's fragment loads on distinct banks; for the
// token rows it is the K-major 64-byte-swizzled layout the wgmma descriptor reads (8-row groups 512 bytes
// apart, every box 512-byte aligned, a k16 step = 32 bytes inside the 64-byte row).
#include <cuda.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <type_traits>

#include "kernels/common/bulk_copy.cuh"
#include "kernels/common/cuda_check.h"
#include "kernels/common/device_info.h"
#include "kernels/common/pdl.cuh"
#include "kernels/common/smem_attribute.h"
#include "kernels/common/static_width.cuh"
#include "kernels/common/tensor_map.h"
#include "kernels/common/wgmma.cuh"
#include "kernels/moe/mxfp4_mma.cuh"
#include "kernels/moe/mxfp4_tensor_maps.h"
#include "kernels/moe/mxfp4_tiled_gemm.h"
#include "kernels/moe/mxfp4_word_order.h"
#include "kernels/moe/routing.h"
#include "kernels/moe/swiglu.cuh"

namespace orchid::kernels {
namespace {

using namespace mxfp4_detail;

constexpr int kConsumerWarps = 8;                    // two warpgroups: dequantize, wgmma
constexpr int kThreads = 32 * (kConsumerWarps + 1);  // + one producer warp issuing the bulk copies
constexpr int kMaxStages = 8;
// Token n8 tiles up to which a CTA runs mma.sync rather than wgmma (measured: at 8 and 16 token rows the
// wgmma loop, with a warpgroup-wide fence, commit and wait per MX block, was 6-9% slower; from 24 rows on
// wgmma wins, by 16% at 48: bench/RESULTS.md).
constexpr int kMmaSyncMaxTiles = 2;
// Shared memory one CTA may take so that kMinBlocks fit on an SM (228 KB less the per-CTA reserve; one CTA:
// the opt-in limit of a block, 227 KB, less a margin).
constexpr int smem_budget(int min_blocks) {
  return min_blocks >= 2 ? 112 * 1024 : 224 * 1024;
}
// Scale bytes the stage count is planned for (k = 2880, the gpt-oss experts); a larger k gets fewer CTAs
// per SM, not a failure.
constexpr int kPlannedKmx = 90;

// A CTA shape: kMTiles m16 tiles of weight rows per consumer warp (= wgmmas per warpgroup and k16 step),
// kChunkMx MX blocks (of 32 k) per ring stage. Rows per CTA = 8 warps x 16 x kMTiles. kMinBlocks: CTAs per
// SM the registers and shared memory are planned for (two: 96 registers a thread; one, for 128-token tiles:
// ptxas then caps the 288 threads at 168). kGroupsInFlight: wgmma groups a warpgroup keeps in flight while
// it dequantizes the next block (2: two register sets for the A fragments; with two m-tiles that does not
// fit in 96 registers and ptxas would serialize the wgmmas, so those wait for each group before the next).
// The ring is as deep as kMinBlocks CTAs per SM allow for the token tile (2..8 stages).
template <int kMTiles_, int kChunkMx_, int kMinBlocks_, int kGroupsInFlight_>
struct Shape {
  static constexpr int kMTiles = kMTiles_, kChunkMx = kChunkMx_;
  static constexpr int kMinBlocks = kMinBlocks_, kGroupsInFlight = kGroupsInFlight_;
  static_assert(kGroupsInFlight == 1 || kGroupsInFlight == 2, "one or two wgmma groups in flight");
  static constexpr int kRowsPerWarp = 16 * kMTiles;
  static constexpr int kRowsPerCta = kConsumerWarps * kRowsPerWarp;
  static_assert(kChunkMx * 16 == 64, "a weight row of a stage is one 64-byte swizzle span");
  static constexpr int kWRowBytes = kChunkMx * 16;  // one weight row of a stage (swizzled)
  static constexpr int kWStageBytes = kRowsPerCta * kWRowBytes;
  // One MX block of the tile's token rows: 64 bytes (32 bf16) a row, 512-byte aligned (8-row groups).
  static constexpr int token_block_bytes(int nt) { return 8 * nt * 64; }
  // Stages start 1 KB-aligned: the tensor copy's 64-byte swizzle is a function of the shared address.
  static constexpr int stage_bytes(int nt) {
    return (kWStageBytes + kChunkMx * token_block_bytes(nt) + 1023) / 1024 * 1024;
  }
  static constexpr int scale_bytes(int k) { return (kRowsPerCta * (k / 32) + 15) / 16 * 16; }
  static constexpr int stages(int nt) {
    const int fit = (smem_budget(kMinBlocks) - 1024 - kRowsPerCta * kPlannedKmx - 256) / stage_bytes(nt);
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

// One m16 tile's A fragments of an MX block from its two weight words (rows g and g + 8) and their scale
// factors: [4 s + i] = k16 step s, register i (wgmma.cuh's A layout, also mma.sync's).
template <bool kTiledOrder>
__device__ __forceinline__ void place_mx_block(uint32_t (&f)[8], uint32_t wa, uint32_t wb, uint32_t sa,
                                               uint32_t sb) {
  f[0] = mul_bf16x2(pair_bf16x2<kTiledOrder, 0>(wa), sa);
  f[1] = mul_bf16x2(pair_bf16x2<kTiledOrder, 0>(wb), sb);
  f[2] = mul_bf16x2(pair_bf16x2<kTiledOrder, 1>(wa), sa);
  f[3] = mul_bf16x2(pair_bf16x2<kTiledOrder, 1>(wb), sb);
  f[4] = mul_bf16x2(pair_bf16x2<kTiledOrder, 2>(wa), sa);
  f[5] = mul_bf16x2(pair_bf16x2<kTiledOrder, 2>(wb), sb);
  f[6] = mul_bf16x2(pair_bf16x2<kTiledOrder, 3>(wa), sa);
  f[7] = mul_bf16x2(pair_bf16x2<kTiledOrder, 3>(wb), sb);
}

// The main loop is compiled for the token n-tiles in use (with_used_tiles): tiles of up to 64 tokens take
// every count (kStep 1); the 128-token tiles of prefill-sized steps 64 or 128 tokens (kStep 8: two copies of
// the loop instead of sixteen; the columns past a tile's rows are dropped anyway).

// kNT: n8 tiles of token rows per CTA tile (tile_tokens / 8).
// kStraight: the mma.sync loop runs whole stages as straight-line code (mxfp4_straight_chunks); kMtPipe: the
// wgmma loop of two m-tiles a warp pipelines them (mxfp4_mt_pipe). Template parameters, so that the default
// kernels keep their registers and schedule.
template <class Sh, int kNT, bool kSwiglu, bool kTiledOrder, bool kStraight, bool kMtPipe>
__global__ void __launch_bounds__(kThreads, Sh::kMinBlocks)
    mxfp4_tiled_kernel(Mxfp4TiledArgs p, const __grid_constant__ CUtensorMap wmap,
                       const __grid_constant__ CUtensorMap xmap) {
  // Programmatic dependent launch (kernels/common/pdl.cuh). With early_weights the producer requests the
  // first stages' weights first and waits before the token rows; the consumers wait after their main loop
  // (the tokens they read came after the producer's wait), before the stores.
  if (!p.early_weights) pdl_wait();
  constexpr int kMTiles = Sh::kMTiles, kChunkMx = Sh::kChunkMx, kStages = Sh::stages(kNT);
  constexpr int kRowsPerWarp = Sh::kRowsPerWarp, kRowsPerCta = Sh::kRowsPerCta;
  constexpr int kWRowBytes = Sh::kWRowBytes, kWStageBytes = Sh::kWStageBytes;
  constexpr int kTokens = 8 * kNT, kStageBytes = Sh::stage_bytes(kNT);
  constexpr int kTokBlockBytes = Sh::token_block_bytes(kNT);
  extern __shared__ __align__(128) uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);

  const int2 tile = reinterpret_cast<const int2*>(p.tiles)[blockIdx.x];
  const int e = tile.x;
  if (e < 0) {
    if (p.early_weights) pdl_wait();
    return;
  }
  const int rbase = p.offsets[e] + tile.y;  // first permuted row of this tile
  const int m = min(p.offsets[e + 1] - rbase, kTokens);
  const int n = p.n, k = p.k, kmx = k / 32;
  const int nfull = kmx / kChunkMx, tail = kmx % kChunkMx, nchunks = nfull + (tail > 0);
  const int n0 = blockIdx.y * kRowsPerCta;
  const int cta_rows = min(kRowsPerCta, n - n0);  // a multiple of 16
  // Whole warpgroups issue the wgmmas: a warpgroup with any of the CTA's rows runs all four warps.
  const int busy_warps = min(kConsumerWarps, (cta_rows + 4 * kRowsPerWarp - 1) / (4 * kRowsPerWarp) * 4);
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
    // Producer: the CTA's scales once, then per stage the weights as one box and the token rows as one box
    // per MX block. The k tail of the last stage is not copied (the consumers skip it); whole boxes count
    // towards the stage's bytes, the zero fill past k or past the last rows included.
    if (lane == 0) {
      const uint32_t bytes = uint32_t(cta_rows * kmx);  // 16 * kmx * (cta_rows / 16)
      mbar_arrive_expect_tx(&scales_ready, bytes);
      bulk_copy_g2s(ss, p.scales + (int64_t(e) * n + n0) * kmx, bytes, &scales_ready);
      const int wrow0 = e * n + n0;  // the CTA's first row in the weight tensor map
      // Stage c's weights: one box (weight_map), its 16-row groups' chunk c when repacked.
      auto copy_weights = [&](uint8_t* dst, int c, uint64_t* bar) {
        if constexpr (kTiledOrder)
          tensor_copy_4d(dst, &wmap, 0, 0, wrow0 / 16, c, bar);
        else
          tensor_copy_2d(dst, &wmap, c * kChunkMx * 16, wrow0, bar);
      };
      // Stages [0, early): their weights requested before the wait, their token rows after it.
      const int early = p.early_weights ? min(kStages, nchunks) : 0;
      for (int c = 0; c < early; ++c) {
        const int blocks = c < nfull ? kChunkMx : tail;
        mbar_arrive_expect_tx(&full[c], kWStageBytes + blocks * kTokBlockBytes);
        copy_weights(smem + c * kStageBytes, c, &full[c]);
      }
      if (p.early_weights) pdl_wait();  // the token rows are the previous kernel's output
      for (int c = 0; c < nchunks; ++c) {
        const int st = c % kStages;
        const int blocks = c < nfull ? kChunkMx : tail;
        uint8_t* stage = smem + st * kStageBytes;
        if (c >= early) {
          if (c >= kStages) mbar_wait_idle(&empty[st], ((c / kStages) - 1) & 1);
          mbar_arrive_expect_tx(&full[st], kWStageBytes + blocks * kTokBlockBytes);
          copy_weights(stage, c, &full[st]);
        }
        for (int j = 0; j < blocks; ++j)
          tensor_copy_2d(stage + kWStageBytes + j * kTokBlockBytes, &xmap, (c * kChunkMx + j) * 64, rbase,
                         &full[st]);
      }
    }
    return;  // an exited thread counts as having let the next kernel start (pdl.cuh)
  }
  if (warp >= busy_warps) {
    if (p.early_weights) pdl_wait();
    return;
  }
  // Rows of this warp inside the CTA (whole m16 tiles; <= 0 for a warp past the CTA's rows, whose results
  // are dropped).
  const int warp_rows = min(kRowsPerWarp, cta_rows - warp * kRowsPerWarp);

  float acc[kMTiles][4 * kNT];  // wgmma accumulators: [4 nt + q] = token column 8 nt + 2t + (q & 1)
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int i = 0; i < 4 * kNT; ++i) acc[mt][i] = 0.0f;
  const int wr0 = warp * kRowsPerWarp + g;  // this lane's row in m-tile mt: wr0 + 16 mt (+ 8)
  // A warp's last m-tile may lie past the CTA's rows (its shared rows hold another expert's rows or the
  // zero fill): its scale rows are clamped into the CTA's, so the factors stay finite, and the epilogue
  // drops its results.
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

  // The main loop over k for kV n8 tiles of token rows in use (the rest of the tile is never read into a
  // result): up to kMmaSyncMaxTiles on mma.sync, above on wgmma.
  auto run = [&](auto v) {
    constexpr int kV = decltype(v)::value;
    // The A fragments of one MX block: [mt][4 s + i] = k16 step s, register i (place_mx_block). The
    // lane's 4 bytes 4t..4t+3 of a row's block are elements 8t..8t+7; register i of step s holds elements
    // 8t + 2s + (i >> 1) and + 4 of row g + 8 (i & 1): the positions mxfp4_tiled_pos gives the activations.
    auto dequant = [&](uint32_t(&f)[kMTiles][8], const uint8_t* wst, int j, int mx) {
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        const uint32_t wa = lds32(wst + (16 * mt) * kWRowBytes + (j ^ wsw) * 16);
        const uint32_t wb = lds32(wst + (16 * mt + 8) * kWRowBytes + (j ^ wsw) * 16);
        const uint32_t sa = mx_scale_bf16x2(srow[mt][0][mx], scale_base);
        const uint32_t sb = mx_scale_bf16x2(srow[mt][1][mx], scale_base);
        place_mx_block<kTiledOrder>(f[mt], wa, wb, sa, sb);
      }
    };
    if constexpr (kV <= kMmaSyncMaxTiles) {
      // mma.sync: per MX block and n8 tile one ldmatrix.x4 gives the B registers of both k16 steps (matrix
      // q = the 16-byte column q of the rows: positions 8q..8q+7), then 2 MMAs per m-tile. Lane l addresses
      // row l % 8 of matrix l / 8, swizzled as the tensor copy wrote it.
      const int r = lane % 8, q = lane / 8;
      const uint32_t b_lane = uint32_t(r * 64 + 16 * (q ^ ((r >> 1) & 3)));
      uint32_t f[kMTiles][8];
      for (int c = 0; c < nchunks; ++c) {
        const int st = c % kStages;
        const int blocks = c < nfull ? kChunkMx : tail;
        mbar_wait(&full[st], (c / kStages) & 1);
        const uint8_t* wst = smem + st * kStageBytes + w_lane;
        const uint32_t tokens = smem_addr(smem + st * kStageBytes + kWStageBytes) + b_lane;
        auto blocks_of_chunk = [&](auto whole) {
#pragma unroll
          for (int j = 0; j < kChunkMx; ++j) {
            if (decltype(whole)::value || j < blocks) {  // CTA-uniform
              dequant(f, wst, j, kChunkMx * c + j);
#pragma unroll
              for (int nt = 0; nt < kV; ++nt) {
                uint32_t b[4];
                ldmatrix_x4(tokens + j * kTokBlockBytes + nt * 512, b);
#pragma unroll
                for (int mt = 0; mt < kMTiles; ++mt) {
                  mma_m16n8k16_bf16(&acc[mt][4 * nt], f[mt][0], f[mt][1], f[mt][2], f[mt][3], b[0], b[1]);
                  mma_m16n8k16_bf16(&acc[mt][4 * nt], f[mt][4], f[mt][5], f[mt][6], f[mt][7], b[2], b[3]);
                }
              }
            }
          }
        };
        if (kStraight && c < nfull)
          blocks_of_chunk(std::true_type{});
        else
          blocks_of_chunk(std::false_type{});
        __syncwarp();
        if (lane == 0) mbar_arrive(&empty[st]);
      }
    } else if constexpr (kMtPipe) {
      // Two m-tiles a warp, one register set each: a wgmma group per m-tile and MX block, so that while
      // one m-tile's group runs the warp dequantizes the other's next block into the registers whose group
      // has completed (wait_group 1). The 256-row CTAs' default loop waits for both m-tiles' MMAs before the
      // next block's loads; this overlaps them with no second register set.
      static_assert(kMTiles == 2, "the m-tile pipeline takes two m-tiles a warp");
      constexpr int kN = 8 * kV;
      uint32_t a[kMTiles][8];
      const uint64_t desc0 = wgmma_desc(smem_addr(smem + kWStageBytes), 16, 512, 2);
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) fence_operands(acc[mt]);
      for (int c = 0; c < nchunks; ++c) {
        const int st = c % kStages;
        const int blocks = c < nfull ? kChunkMx : tail;
        mbar_wait(&full[st], (c / kStages) & 1);
        const uint8_t* wst = smem + st * kStageBytes + w_lane;
        const uint64_t desc = wgmma_desc_advance(desc0, uint32_t(st * kStageBytes));
#pragma unroll
        for (int j = 0; j < kChunkMx; ++j) {
          if (j < blocks) {  // CTA-uniform
            const int mx = kChunkMx * c + j;
            const uint64_t dj = wgmma_desc_advance(desc, uint32_t(j * kTokBlockBytes));
#pragma unroll
            for (int mt = 0; mt < kMTiles; ++mt) {
              // The shared loads go first: the wait below orders memory, and they touch no MMA register.
              const uint32_t wa = lds32(wst + (16 * mt) * kWRowBytes + (j ^ wsw) * 16);
              const uint32_t wb = lds32(wst + (16 * mt + 8) * kWRowBytes + (j ^ wsw) * 16);
              const uint32_t sa = mx_scale_bf16x2(srow[mt][0][mx], scale_base);
              const uint32_t sb = mx_scale_bf16x2(srow[mt][1][mx], scale_base);
              wgmma_wait<1>();  // this m-tile's group of the block before is done (none pending at the start)
              if (mt == 1 && j == 0 && c > 0) {
                // ... and with it every group that read the previous stage's token rows.
                __syncwarp();
                if (lane == 0) mbar_arrive(&empty[(c - 1) % kStages]);
              }
              place_mx_block<kTiledOrder>(a[mt], wa, wb, sa, sb);
              wgmma_fence();
              wgmma_bf16_rs<kN, 0>(acc[mt], &a[mt][0], dj, 1);
              wgmma_bf16_rs<kN, 0>(acc[mt], &a[mt][4], wgmma_desc_advance(dj, 32), 1);
              wgmma_commit();
            }
          }
        }
      }
      wgmma_wait<0>();
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) fence_operands(acc[mt]);
    } else {
      constexpr int kN = 8 * kV;
      constexpr int kSets = Sh::kGroupsInFlight;
      uint32_t a[kSets][kMTiles][8];
      // One wgmma group: both k16 steps of a block for every m-tile. The token rows of the block are a
      // K-major 64-byte-swizzled tile (8-row groups 512 bytes apart; the leading offset is unused with a
      // swizzle).
      // The descriptor is built for stage 0's first block; a stage's, block's and k16 step's are a constant
      // number of 16-byte units further on (wgmma_desc_advance). In the SASS at 64 tokens a block's group
      // takes 46 instructions instead of 48 (the compiler still rebuilds the base in the loop).
      const uint64_t desc0 = wgmma_desc(smem_addr(smem + kWStageBytes), 16, 512, 2);
      auto issue = [&](const uint32_t(&f)[kMTiles][8], uint64_t desc) {
        wgmma_fence();
#pragma unroll
        for (int s = 0; s < 2; ++s)
#pragma unroll
          for (int mt = 0; mt < kMTiles; ++mt)
            wgmma_bf16_rs<kN, 0>(acc[mt], &f[mt][4 * s], wgmma_desc_advance(desc, 32 * s), 1);
        wgmma_commit();
      };
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) fence_operands(acc[mt]);
      for (int c = 0; c < nchunks; ++c) {
        const int st = c % kStages;
        const int blocks = c < nfull ? kChunkMx : tail;
        mbar_wait(&full[st], (c / kStages) & 1);
        const uint8_t* wst = smem + st * kStageBytes + w_lane;
        const uint64_t desc = wgmma_desc_advance(desc0, uint32_t(st * kStageBytes));
        // (No straight variant here: ptxas serializes the wgmmas of straight-line stages, C7513.)
#pragma unroll
        for (int j = 0; j < kChunkMx; ++j) {
          if (j < blocks) {  // CTA-uniform
            dequant(a[j % kSets], wst, j, kChunkMx * c + j);
            issue(a[j % kSets], wgmma_desc_advance(desc, uint32_t(j * kTokBlockBytes)));
            wgmma_wait<kSets - 1>();  // the group that used the next register set is done
            if (j == 0 && c > 0) {
              // ... and with it every wgmma that read the previous stage's token rows.
              __syncwarp();
              if (lane == 0) mbar_arrive(&empty[(c - 1) % kStages]);
            }
          }
        }
      }
      wgmma_wait<0>();
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) fence_operands(acc[mt]);
    }
  };
  const int valid_nt = (m + 7) / 8;  // n-tiles that hold a token row (1..kNT)
  with_used_tiles<kNT, (kNT > 8 ? 8 : 1)>(valid_nt, run);
  if (p.early_weights) pdl_wait();  // complete long since (the tokens came after it): the contract's wait
  pdl_launch_dependents();          // only the epilogue is left (kernels/common/pdl.cuh)

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
            y[(int64_t(rbase) + tok) * n + row + (q >> 1) * 8] =
                __float2bfloat16_rn(acc[mt][4 * nt + q] * unbias);
        }
      }
    }
  } else {
    // Row g's partner row g^1 lives in lane ^ 4; even-g lanes hold a gate row and write z[i], i = row / 2,
    // at its position in the tiled order (the down GEMM's input as is).
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
          const float v = acc[mt][4 * nt + q] * unbias;
          const float other = __shfl_xor_sync(0xffffffffu, v, 4);
          const int tok = nt * 8 + 2 * t + (q & 1);
          const int r = row + (q >> 1) * 8;
          if ((g & 1) == 0 && tok < m) {
            const float gate = v + __bfloat162float(b1[r]);
            const float up = other + __bfloat162float(b1[r + 1]);
            const int i = r / 2;
            z[(int64_t(rbase) + tok) * zn + (i & ~31) + mxfp4_tiled_pos(i & 31)] =
                __float2bfloat16_rn(swiglu_fp32(gate, up, p.swiglu.limit, p.swiglu.alpha));
          }
        }
      }
    }
  }
}

// The work list by one block of at least kMoeMaxExperts threads: per-expert tile counts, an exclusive scan in
// shared memory, then every thread fills entries (binary search for the expert of each entry).
__device__ __forceinline__ void tiled_plan_block(const int* __restrict__ offsets, int E, int tile_tokens,
                                                 int2* __restrict__ tiles, int max_tiles) {
  __shared__ int start[kMoeMaxExperts + 1];
  const int e = threadIdx.x;
  const bool mine = e < kMoeMaxExperts;
  if (mine) {
    start[e + 1] = e < E ? (offsets[e + 1] - offsets[e] + tile_tokens - 1) / tile_tokens : 0;
    if (e == 0) start[0] = 0;
  }
  __syncthreads();
  for (int d = 1; d < kMoeMaxExperts; d *= 2) {  // inclusive scan of start[1..]
    const int v = mine && e >= d ? start[e + 1 - d] : 0;
    __syncthreads();
    if (mine) start[e + 1] += v;
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

__global__ void __launch_bounds__(kMoeMaxExperts)
    tiled_plan_kernel(const int* __restrict__ offsets, int E, int tile_tokens, int2* __restrict__ tiles,
                      int max_tiles) {
  pdl_wait();  // programmatic dependent launch (kernels/common/pdl.cuh)
  tiled_plan_block(offsets, E, tile_tokens, tiles, max_tiles);
}

// MX blocks first, first + stride, ... of the gathered rows: one per thread (32 bf16, four 16-byte loads and
// stores). Output 16-byte group 2s + h, word t = elements 8t + 2s + h (low half) and 8t + 4 + 2s + h (high
// half): words s and 2 + s of input group t, their half h.
__device__ __forceinline__ void tiled_activation_blocks(const uint4* __restrict__ x,
                                                        const int* __restrict__ row_map, int blocks_per_row,
                                                        int64_t blocks, uint4* __restrict__ out,
                                                        int64_t first, int64_t stride) {
  for (int64_t i = first; i < blocks; i += stride) {
    int64_t src = i;
    if (row_map) {
      const int64_t r = i / blocks_per_row;
      src = int64_t(row_map[r]) * blocks_per_row + (i - r * blocks_per_row);
    }
    uint32_t w[4][4];
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const uint4 v = x[4 * src + q];
      w[q][0] = v.x;
      w[q][1] = v.y;
      w[q][2] = v.z;
      w[q][3] = v.w;
    }
#pragma unroll
    for (int s = 0; s < 2; ++s)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint32_t sel = h ? 0x7632u : 0x5410u;
        out[4 * i + 2 * s + h] =
            make_uint4(__byte_perm(w[0][s], w[0][2 + s], sel), __byte_perm(w[1][s], w[1][2 + s], sel),
                       __byte_perm(w[2][s], w[2][2 + s], sel), __byte_perm(w[3][s], w[3][2 + s], sel));
      }
  }
}

constexpr int kActivationThreads = 256;
__global__ void __launch_bounds__(kActivationThreads)
    tiled_activation_kernel(const uint4* __restrict__ x, const int* __restrict__ row_map, int blocks_per_row,
                            int64_t blocks, uint4* __restrict__ out) {
  pdl_wait();  // programmatic dependent launch (kernels/common/pdl.cuh)
  tiled_activation_blocks(x, row_map, blocks_per_row, blocks, out,
                          blockIdx.x * int64_t(blockDim.x) + threadIdx.x, int64_t(gridDim.x) * blockDim.x);
}

// Both in one launch (a layer's tiled path needs both before its first GEMM): block 0 plans, the others
// gather.
__global__ void __launch_bounds__(kActivationThreads)
    tiled_prepare_kernel(const uint4* __restrict__ x, const int* __restrict__ row_map, int blocks_per_row,
                         int64_t blocks, uint4* __restrict__ out, const int* __restrict__ offsets, int E,
                         int tile_tokens, int2* __restrict__ tiles, int max_tiles) {
  static_assert(kActivationThreads >= kMoeMaxExperts, "the plan takes a thread per expert");
  pdl_wait();  // programmatic dependent launch (kernels/common/pdl.cuh)
  if (blockIdx.x == 0) {
    tiled_plan_block(offsets, E, tile_tokens, tiles, max_tiles);
    return;
  }
  tiled_activation_blocks(x, row_map, blocks_per_row, blocks, out,
                          (blockIdx.x - 1) * int64_t(blockDim.x) + threadIdx.x,
                          int64_t(gridDim.x - 1) * blockDim.x);
}

template <class Sh, int kNT, bool kSwiglu, bool kTiledOrder, bool kStraight, bool kMtPipe>
struct TiledKernelTag {};

// The expert blocks, one box a stage (4 MX blocks of each of the CTA's rows, 64-byte swizzled into the same
// shared layout either way). Checkpoint layout: [E * n rows][k / 32 * 16 bytes], boxes of 64 bytes x the
// CTA's rows. Repacked: one chunk of the CTA's groups (mxfp4_repacked_weight_map): 16 contiguous kilobytes
// (a 256-row CTA) instead of 256 pieces of 64 bytes.
CUtensorMap weight_map(const Mxfp4TiledArgs& p, int cta_rows) {
  if (p.tiled_order) return mxfp4_repacked_weight_map(p.blocks, p.num_experts, p.n, p.k, cta_rows);
  const uint64_t rows = uint64_t(p.num_experts) * uint64_t(p.n), kmx = uint64_t(p.k / 32);
  return mxfp4_byte_tensor_map(p.blocks, rows, kmx * 16, 64, cta_rows, CU_TENSOR_MAP_SWIZZLE_64B,
                               "mxfp4_tiled_gemm: the expert blocks");
}

template <class Sh, int kNT, bool kSwiglu, bool kTiledOrder, bool kStraight = false, bool kMtPipe = false>
void launch(const Mxfp4TiledArgs& p, cudaStream_t stream) {
  if constexpr (kTiledOrder && !kStraight && !kMtPipe) {  // the variants: the default (tiled) order only
    if constexpr (Sh::kMTiles == 2 && Sh::kGroupsInFlight == 1 && kNT > kMmaSyncMaxTiles) {
      if (mxfp4_mt_pipe()) return launch<Sh, kNT, kSwiglu, true, false, true>(p, stream);
    }
    // Straight stages for the 8- and 16-token tiles alone: with larger tiles (whose smaller tiles' rows
    // run the mma.sync loop too) the B=128 step was 1% slower.
    if constexpr (kNT <= kMmaSyncMaxTiles) {
      if (mxfp4_straight_chunks()) return launch<Sh, kNT, kSwiglu, true, true, false>(p, stream);
    }
  }
  const int bytes = Sh::smem_bytes(kNT, p.k);
  ORCHID_KERNEL_REQUIRE(bytes <= device_info().max_smem_per_block_optin,
                        "mxfp4_tiled_gemm: k too large for the shared scale tile");
  auto kernel = mxfp4_tiled_kernel<Sh, kNT, kSwiglu, kTiledOrder, kStraight, kMtPipe>;
  // Raised once per device to the opt-in limit (the launch's own size decides the occupancy).
  ensure_dynamic_smem<TiledKernelTag<Sh, kNT, kSwiglu, kTiledOrder, kStraight, kMtPipe>>(
      kernel, device_info().max_smem_per_block_optin);
  const dim3 grid(unsigned(p.max_tiles), unsigned((p.n + Sh::kRowsPerCta - 1) / Sh::kRowsPerCta));
  // One box = one stage's weights (weight_map); the tokens as [x_row_count][2 k bytes], one box = one MX
  // block of the tile.
  const CUtensorMap wmap = weight_map(p, Sh::kRowsPerCta);
  const CUtensorMap xmap =
      mxfp4_byte_tensor_map(p.x, uint64_t(p.x_row_count), uint64_t(p.k) * 2, 64, 8 * kNT,
                            CU_TENSOR_MAP_SWIZZLE_64B, "mxfp4_tiled_gemm: the token rows");
  launch_pdl(kernel, grid, dim3(kThreads), size_t(bytes), stream, p, wmap, xmap);
}

template <class Sh, bool kSwiglu, bool kTiledOrder>
void dispatch_tokens(const Mxfp4TiledArgs& p, cudaStream_t stream) {
  switch (p.tile_tokens) {
    case 16:
      return launch<Sh, 2, kSwiglu, kTiledOrder>(p, stream);
    case 32:
      return launch<Sh, 4, kSwiglu, kTiledOrder>(p, stream);
    case 48:
      return launch<Sh, 6, kSwiglu, kTiledOrder>(p, stream);
    case 64:
      // 256-row CTAs hold 2 x 32 accumulators a thread at 64 tokens, past the 96 registers of two CTAs per
      // SM (ptxas spills): 64-token tiles take 128-row CTAs.
      if constexpr (Sh::kMTiles == 1)
        return launch<Sh, 8, kSwiglu, kTiledOrder>(p, stream);
      else
        ORCHID_KERNEL_REQUIRE(false, "mxfp4_tiled_gemm: 64-token tiles need the 128-row CTA shape");
      return;
    case 128:
      // Prefill-sized steps: one CTA an SM, whose registers hold 64 accumulators a thread and two sets of A
      // fragments (the next block dequantized while the MMAs run) and whose shared memory holds a ring of
      // 128-token stages; each dequantized weight serves twice the tokens of a 64-token tile. 128-row CTAs
      // only: ptxas caps a 288-thread CTA at 168 registers, and 256 rows spilled there.
      if constexpr (Sh::kMTiles == 1)
        return launch<Shape<1, Sh::kChunkMx, 1, 2>, 16, kSwiglu, kTiledOrder>(p, stream);
      else
        ORCHID_KERNEL_REQUIRE(false, "mxfp4_tiled_gemm: 128-token tiles need the 128-row CTA shape");
      return;
    default:
      ORCHID_KERNEL_REQUIRE(false, "mxfp4_tiled_gemm: tile_tokens must be 16, 32, 48, 64 or 128");
  }
}

template <bool kSwiglu, bool kTiledOrder>
void dispatch(const Mxfp4TiledArgs& p, cudaStream_t stream) {
  switch (p.cta_shape) {
    case Mxfp4TiledShape::kRows128:
      return dispatch_tokens<Shape<1, 4, 2, 2>, kSwiglu, kTiledOrder>(p, stream);
    case Mxfp4TiledShape::kRows256:
      return dispatch_tokens<Shape<2, 4, 2, 1>, kSwiglu, kTiledOrder>(p, stream);
  }
  ORCHID_KERNEL_REQUIRE(false, "mxfp4_tiled_gemm: unknown CTA shape");
}

}  // namespace

CUtensorMap mxfp4_byte_tensor_map(const void* base, uint64_t rows, uint64_t row_bytes, int box_bytes,
                                  int box_rows, CUtensorMapSwizzle swizzle, const char* what) {
  const uint64_t dims[2] = {row_bytes, rows};
  const uint64_t strides[1] = {row_bytes};
  const uint32_t box[2] = {uint32_t(box_bytes), uint32_t(box_rows)};
  return encode_tensor_map(CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, base, dims, strides, box, swizzle, what);
}

CUtensorMap mxfp4_repacked_weight_map(const void* blocks, int num_experts, int n, int k, int cta_rows) {
  const uint64_t rows = uint64_t(num_experts) * uint64_t(n);
  const uint64_t chunks = uint64_t(mxfp4_order::grouped_kmx(k / 32)) / 4;
  const uint64_t dims[4] = {64, 16, rows / 16, chunks};
  const uint64_t strides[3] = {64, 1024, rows / 16 * 1024};
  const uint32_t box[4] = {64, 16, uint32_t(cta_rows / 16), 1};
  return encode_tensor_map(CU_TENSOR_MAP_DATA_TYPE_UINT8, 4, blocks, dims, strides, box,
                           CU_TENSOR_MAP_SWIZZLE_64B, "mxfp4 GEMM: the repacked expert blocks");
}

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

void mxfp4_tiled_activation(const void* x, int rows, int k, void* out, cudaStream_t stream,
                            const int* row_map) {
  ORCHID_KERNEL_REQUIRE(k % 32 == 0, "mxfp4_tiled_activation: k must be a multiple of 32");
  const int64_t blocks = int64_t(rows) * (k / 32);
  if (blocks == 0) return;
  const int ctas = int(
      std::min<int64_t>((blocks + kActivationThreads - 1) / kActivationThreads, 4 * device_info().sm_count));
  launch_pdl(tiled_activation_kernel, dim3(ctas), dim3(kActivationThreads), 0, stream,
             static_cast<const uint4*>(x), row_map, k / 32, blocks, static_cast<uint4*>(out));
  ORCHID_CUDA_CHECK_LAUNCH();
}

void mxfp4_tiled_prepare(const void* x, int rows, int k, void* out, const int* row_map, const int* offsets,
                         int num_experts, int tile_tokens, int* tiles, int max_tiles, cudaStream_t stream) {
  ORCHID_KERNEL_REQUIRE(k % 32 == 0, "mxfp4_tiled_prepare: k must be a multiple of 32");
  ORCHID_KERNEL_REQUIRE(num_experts >= 1 && num_experts <= kMoeMaxExperts,
                        "mxfp4_tiled_prepare: expert count out of range");
  ORCHID_KERNEL_REQUIRE(tile_tokens > 0 && offsets && tiles, "mxfp4_tiled_prepare: bad arguments");
  const int64_t blocks = int64_t(rows) * (k / 32);
  const int ctas = 1 + int(std::min<int64_t>((blocks + kActivationThreads - 1) / kActivationThreads,
                                             4 * device_info().sm_count));
  launch_pdl(tiled_prepare_kernel, dim3(ctas), dim3(kActivationThreads), 0, stream,
             static_cast<const uint4*>(x), row_map, k / 32, blocks, static_cast<uint4*>(out), offsets,
             num_experts, tile_tokens, reinterpret_cast<int2*>(tiles), max_tiles);
  ORCHID_CUDA_CHECK_LAUNCH();
}

void mxfp4_tiled_gemm(const Mxfp4TiledArgs& p, cudaStream_t stream) {
  ORCHID_KERNEL_REQUIRE(p.n > 0 && p.n % 16 == 0, "mxfp4_tiled_gemm: n must be a positive multiple of 16");
  ORCHID_KERNEL_REQUIRE(p.k > 0 && p.k % 32 == 0, "mxfp4_tiled_gemm: k must be a positive multiple of 32");
  ORCHID_KERNEL_REQUIRE(p.offsets && p.tiles && p.blocks && p.scales && p.x && p.y,
                        "mxfp4_tiled_gemm: null pointer");
  ORCHID_KERNEL_REQUIRE(!p.swiglu_bias || p.n % 64 == 0,
                        "mxfp4_tiled_gemm: the SwiGLU output (n / 2 columns) must be whole MX blocks");
  ORCHID_KERNEL_REQUIRE(p.x_row_count > 0 || p.max_tiles <= 0,
                        "mxfp4_tiled_gemm: x_row_count must count the rows of x");
  ORCHID_KERNEL_REQUIRE((reinterpret_cast<uintptr_t>(p.x) | reinterpret_cast<uintptr_t>(p.blocks) |
                         reinterpret_cast<uintptr_t>(p.scales)) %
                                16 ==
                            0,
                        "mxfp4_tiled_gemm: x, blocks and scales must be 16-byte aligned");
  if (p.max_tiles <= 0) return;
  if (p.swiglu_bias)
    p.tiled_order ? dispatch<true, true>(p, stream) : dispatch<true, false>(p, stream);
  else
    p.tiled_order ? dispatch<false, true>(p, stream) : dispatch<false, false>(p, stream);
}

}  // namespace orchid::kernels
