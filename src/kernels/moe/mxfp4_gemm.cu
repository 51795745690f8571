// MXFP4 decode GEMM (see mxfp4_gemm.h).
//
// Napkin math, gpt-oss-20b decode at batch 1 (4 experts), one layer:
//   gate_up 4 * 5760 * 2880 * 17/32 B = 35.3 MB, down 17.6 MB -> 52.9 MB -> 12.7 us at 4.17 TB/s;
//   24 layers: 0.30 ms of the ~0.9 ms/token floor (3.71 GB/token incl. attention and lm_head).
// FLOPs are negligible (2 per weight per token); the limits are bytes in flight and the dequant ALU work:
// ~2 integer ops per weight (4 per f16x2 pair below), i.e. ~60 of the 64 INT32 lanes/clk/SM needed to keep
// up with 4.17 TB/s -- so the dequant is kept to shifts and LOP3s, and the MX scale is applied once per
// 32-column block to the fp32 partial sums rather than to every weight.
//
// Structure: CTA = kWarps warps in groups of k_split; a group owns 16 weight rows of one expert (one m16
// MMA tile), each warp of it a 1/k_split slice of k, streamed through its own cp.async ring (kStages x 16
// rows x 4 MX blocks), so warps never wait on each other inside the k loop. Tokens form the MMA's n8
// dimension (m16n8k16, f16 x f16 -> f32), 8 * kNT tokens per pass; a group's slices meet in shared memory
// (in slice order) before the epilogue. Why k slices: a warp keeps only kStages - 1 chunks (3 KB at 4
// stages) in flight, so one warp streaming a whole 2880-wide row block needs ~11 us at decode whatever the
// SM count; at batch 1 the grid is a few hundred warps, and splitting k gives each one a shorter stream.
//
// NOTES: the MMA fragments and the activations' "MX order" are described in mxfp4_mma.cuh.
#include <cuda_bf16.h>

#include <cuda_fp16.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "kernels/common/cuda_check.h"
#include "kernels/common/device_info.h"
#include "kernels/common/pdl.cuh"
#include "kernels/common/smem_attribute.h"
#include "kernels/moe/mxfp4_gemm.h"
#include "kernels/moe/mxfp4_mma.cuh"
#include "kernels/moe/mxfp4_word_order.h"
#include "kernels/moe/swiglu.cuh"

namespace orchid::kernels {
namespace {

using namespace mxfp4_detail;

constexpr int kRowsPerWarp = 16;
constexpr int kStageRowBytes = 80;  // 4 MX blocks (64 B) + 16 B pad: rows g and g+1 hit different banks
constexpr int kStageBytes = kRowsPerWarp * kStageRowBytes;

__host__ __device__ constexpr int x_row_bytes(int k) {
  return (k * 2 + 127) / 128 * 128 + 64;  // == 64 mod 128: the 8 lanes of a 16-byte phase hit distinct banks
}

// Token rows of the activation tile: a pass's 8 * nt, or fewer when no expert has that many (a decode token
// takes one row, not eight: 5.8 KB instead of 46 KB at k 2880, which leaves room for deeper rings or more
// CTAs an SM). The MMA's n8 columns past the tile read its last row; those columns are never stored.
__host__ __device__ constexpr int x_tile_rows(int nt, int max_rows_per_expert) {
  return max_rows_per_expert >= 1 && max_rows_per_expert < 8 * nt ? max_rows_per_expert : 8 * nt;
}

// Activation tile, then per warp its ring and its group's scales (used in the group's first warp), then the
// slices' partial sums for the group reduction.
__host__ __device__ constexpr int smem_bytes(int nt, int tile_rows, int warps, int stages, int k) {
  return tile_rows * x_row_bytes(k) + warps * (stages * kStageBytes + kRowsPerWarp * (k / 32)) +
         warps * nt * 4 * 32 * 4;
}

// kWarps warps of 16 rows per CTA, each with a ring of kStages chunks in flight.
// kStraight (tiled word order): a chunk whose 4 MX blocks all lie in the warp's k range runs them as
// straight-line code, without the per-block exit the chunk holding the range's end needs; the compiler then
// issues the next block's shared loads under this block's MMAs (mxfp4_straight_chunks). A template
// parameter, so that the default kernels keep their registers and schedule.
// The one-token 8-warp kernel is held to three CTAs a multiprocessor (80 registers): the activation fill's
// batch took it to 83, two CTAs an SM. (The one-token 4-warp kernel went from 85 to 114 registers: four CTAs
// an SM, above the ~2.7 a one-token grid places on each.)
template <int kNT, int kWarps, int kStages, bool kTiledOrder, bool kStraight = false>
__global__ void __launch_bounds__(kWarps * 32, kWarps == 8 && kNT == 1 ? 3 : 1)
    mxfp4_moe_gemm_kernel(Mxfp4GemmArgs p) {
  // Programmatic dependent launch (kernels/common/pdl.cuh); with early_weights only the activations wait.
  if (!p.early_weights) pdl_wait();
  extern __shared__ __align__(128) uint8_t smem[];
  const int slot = blockIdx.y;
  if (slot >= *p.num_active) {
    if (p.early_weights) pdl_wait();
    return;
  }
  // Every scale <= 128: the tiled order's weights need no bias (Mxfp4GemmArgs::scale_max).
  const bool unbiased = kTiledOrder && p.scale_max != nullptr && *p.scale_max <= 128u;
  const int e = p.active[slot];
  const int row0 = p.offsets[e];
  const int m = p.offsets[e + 1] - row0;
  const int k = p.k, n = p.n, kmx = k / 32;
  const int xstride = x_row_bytes(k);
  const int tile_rows = x_tile_rows(kNT, p.max_rows_per_expert);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int ks = p.k_split, groups = kWarps / ks, group = warp / ks, slice = warp % ks;
  const int wrow0 = (blockIdx.x * groups + group) * kRowsPerWarp;  // this group's first weight row
  const bool warp_active = wrow0 < n;
  // This warp's MX blocks [mx_begin, mx_end), in chunks of 4.
  const int mx_begin = kmx * slice / ks, mx_end = kmx * (slice + 1) / ks;
  const int nchunks = (mx_end - mx_begin + 3) / 4;

  uint8_t* xs = smem;
  const int warp_bytes = kStages * kStageBytes + kRowsPerWarp * kmx;
  uint8_t* ws = smem + tile_rows * xstride + warp * warp_bytes;
  uint8_t* ss = smem + tile_rows * xstride + group * ks * warp_bytes + kStages * kStageBytes;  // [16][kmx]
  float* red =
      reinterpret_cast<float*>(smem + tile_rows * xstride + kWarps * warp_bytes);  // [warp][nt*4][32]

  // A chunk: the group's 16 rows x 4 MX blocks. Repacked (mxfp4_word_order.h) it is one contiguous kilobyte,
  // and chunk c + 1 of the group lies a whole chunk column (every 16-row group of the tensor) further on;
  // in the checkpoint's layout it is 16 pieces of 64 bytes, the next 64 bytes further on. A lane's two
  // pieces (rows r and r + 8, MX block mx_begin + j of chunk 0) are placed once; chunk c adds c strides.
  const int64_t grow0 = int64_t(e) * n + wrow0;  // the group's first row in the tensor
  const uint8_t* sbase = p.scales + grow0 * kmx;
  const int64_t stride = kTiledOrder ? int64_t(p.num_experts) * n / 16 * 1024 : 64;
  const int lrow = lane / 4, lmx = mx_begin + lane % 4;  // this lane's first piece; its second is 8 rows on
  const uint8_t* src =
      p.blocks + (kTiledOrder ? grow0 * 64 + (lmx >> 2) * stride + (lrow * 4 + (lmx & 3)) * 16
                              : ((grow0 + lrow) * kmx + lmx) * 16);
  const int second = kTiledOrder ? 8 * 64 : 8 * kmx * 16;
  auto issue_chunk = [&](int c) {
    uint8_t* st = ws + (c % kStages) * kStageBytes;
    const bool valid = c < nchunks && mx_begin + 4 * c + lane % 4 < mx_end;
    const uint8_t* from = src + c * stride;
#pragma unroll
    for (int i = 0; i < 2; ++i)
      cp_async_16(st + (lrow + 8 * i) * kStageRowBytes + (lane % 4) * 16,
                  valid ? from + i * second : p.blocks, valid);
    cp_async_commit();
  };

  const __nv_bfloat16* xg = static_cast<const __nv_bfloat16*>(p.x);
  __nv_bfloat16* yg = static_cast<__nv_bfloat16*>(p.y);
  bool scales_loaded = false;
  int bias = 0;  // bf16 path (kTiledOrder): the weights carry 2^-bias (mxfp4_tiled_gemm.cu's rule)

  // Activation tile: tokens tok0.. as fp16 in MX order (saturated), kFill 16-byte pieces a thread at a time:
  // every piece's source row, then every piece, then the stores, so a thread waits on two round trips per
  // batch instead of three per piece. Rows past the expert's tokens are left as they are: each token is its
  // own MMA column, and those columns are never stored.
  constexpr int kFill = 2, kThreads = kWarps * 32;
  const int groups8 = k / 8;
  uint4 xv[kFill];
  auto load_fill = [&](int tok0, int pieces, int base) {
    int64_t from[kFill];
#pragma unroll
    for (int j = 0; j < kFill; ++j) {
      const int idx = base + j * kThreads + threadIdx.x;
      const int64_t r = row0 + tok0 + idx / groups8;
      from[j] = idx < pieces ? (p.x_rows ? p.x_rows[r] : r) * k + idx % groups8 * 8 : 0;
    }
#pragma unroll
    for (int j = 0; j < kFill; ++j)
      if (base + j * kThreads + threadIdx.x < pieces) xv[j] = *reinterpret_cast<const uint4*>(xg + from[j]);
  };
  auto store_fill = [&](int pieces, int base) {
#pragma unroll
    for (int j = 0; j < kFill; ++j) {
      const int idx = base + j * kThreads + threadIdx.x;
      if (idx < pieces)
        *reinterpret_cast<uint4*>(xs + idx / groups8 * xstride + idx % groups8 * 16) =
            kTiledOrder ? bf16x8_mx_order(xv[j]) : bf16x8_to_f16_mx_order(xv[j]);
    }
  };

  // A pass takes the tile's rows of tokens (its MMA columns beyond them are computed and never stored).
  for (int tok0 = 0; tok0 < m; tok0 += tile_rows) {
    const bool first_pass = !scales_loaded;
    const int pieces = min(tile_rows, m - tok0) * groups8;
    // Where x is ready (no early weights), the fill's first batch is requested before the weight copies:
    // issued after them it queues behind the grid's first ~6 MB of weights (bench/RESULTS.md, 2026-12-07
    // seventeenth run: a 3.4 us prologue in a 21 us one-token GEMM).
    const bool x_first = first_pass && !p.early_weights;
    if (x_first) load_fill(tok0, pieces, 0);
    // The weight stream does not depend on the activations: start it before filling the activation tile,
    // so its latency overlaps the fill (this warp's ring is idle here: the previous pass drained it).
    if (warp_active) {
      if (first_pass) {  // the group's 16 rows * kmx bytes, loaded by its warps together: one commit group
        for (int u = slice * 32 + lane; u < kmx; u += 32 * ks) cp_async_16(ss + u * 16, sbase + u * 16, true);
        cp_async_commit();
      }
#pragma unroll
      for (int c = 0; c < kStages - 1; ++c) issue_chunk(c);
    }
    scales_loaded = true;
    if (p.early_weights && first_pass) pdl_wait();  // x is the previous kernel's output
    __syncthreads();                                // the previous pass's MMAs are done with the tile
    if (!x_first) load_fill(tok0, pieces, 0);
    store_fill(pieces, 0);
    for (int base = kFill * kThreads; base < pieces; base += kFill * kThreads) {
      load_fill(tok0, pieces, base);
      store_fill(pieces, base);
    }
    // The scales (the oldest commit group) have landed for every warp before anyone reads them. Unbiased at
    // k split 1 nothing reads them before the loop, whose wait for chunk 0 covers them (the warp's own
    // older copies).
    if (first_pass && warp_active && !(unbiased && ks == 1)) cp_async_wait<kStages - 1>();
    __syncthreads();
    if (!warp_active) continue;
    if constexpr (kTiledOrder) {
      // The group's largest scale sets the bias (the same in every warp of the group).
      if (first_pass && !unbiased) {
        const uint32_t* sw = reinterpret_cast<const uint32_t*>(ss);
        uint32_t mx4 = 0;
        for (int i = lane; i < kRowsPerWarp * kmx / 4; i += 32) mx4 = __vmaxu4(mx4, sw[i]);
        const uint32_t smax = max(max(mx4 & 0xffu, (mx4 >> 8) & 0xffu), max((mx4 >> 16) & 0xffu, mx4 >> 24));
        bias = max(0, int(__reduce_max_sync(0xffffffffu, smax)) - 128);
      }
    }
    const uint32_t scale_base = uint32_t(126 - bias) * 0x00800080u;

    float acc[kNT][4];
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.0f;

    for (int c = 0; c < nchunks; ++c) {
      issue_chunk(c + kStages - 1);  // into the stage consumed at c - 1
      cp_async_wait<kStages - 1>();  // this lane's copies of chunk c have landed
      __syncwarp();                  // ... and every other lane's
      const uint8_t* st = ws + (c % kStages) * kStageBytes;
      if constexpr (kStraight && kTiledOrder) {
        // The guarded loop's tiled-order block, written out again: routing both loops through one helper
        // (a lambda or a device function) moved the default kernels' registers (79 -> 86 at one token,
        // 8 warps: two CTAs an SM instead of three), which this variant must not change until it is measured.
        if (mx_begin + 4 * c + 4 <= mx_end) {
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            const int mx = mx_begin + 4 * c + j;
            const uint32_t wa = *reinterpret_cast<const uint32_t*>(st + g * kStageRowBytes + j * 16 + 4 * t);
            const uint32_t wb =
                *reinterpret_cast<const uint32_t*>(st + (g + 8) * kStageRowBytes + j * 16 + 4 * t);
            const uint32_t sa = mx_scale_bf16x2(ss[g * kmx + mx], scale_base);
            const uint32_t sb = mx_scale_bf16x2(ss[(g + 8) * kmx + mx], scale_base);
            const uint32_t a0 = mul_bf16x2(pair_bf16x2<true, 0>(wa), sa),
                           a1 = mul_bf16x2(pair_bf16x2<true, 1>(wa), sa);
            const uint32_t a2 = mul_bf16x2(pair_bf16x2<true, 2>(wa), sa),
                           a3 = mul_bf16x2(pair_bf16x2<true, 3>(wa), sa);
            const uint32_t b0 = mul_bf16x2(pair_bf16x2<true, 0>(wb), sb),
                           b1 = mul_bf16x2(pair_bf16x2<true, 1>(wb), sb);
            const uint32_t b2 = mul_bf16x2(pair_bf16x2<true, 2>(wb), sb),
                           b3 = mul_bf16x2(pair_bf16x2<true, 3>(wb), sb);
#pragma unroll
            for (int nt = 0; nt < kNT; ++nt) {
              const int xr = min(nt * 8 + g, tile_rows - 1);
              const uint4 xb = *reinterpret_cast<const uint4*>(xs + xr * xstride + mx * 64 + t * 16);
              mma_m16n8k16_bf16(acc[nt], a0, b0, a1, b1, xb.x, xb.y);
              mma_m16n8k16_bf16(acc[nt], a2, b2, a3, b3, xb.z, xb.w);
            }
          }
          __syncwarp();  // the stage is free for the copy issued at the next iteration
          continue;
        }
      }
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int mx = mx_begin + 4 * c + j;
        if (mx >= mx_end) break;
        const uint32_t wa = *reinterpret_cast<const uint32_t*>(st + g * kStageRowBytes + j * 16 + 4 * t);
        const uint32_t wb =
            *reinterpret_cast<const uint32_t*>(st + (g + 8) * kStageRowBytes + j * 16 + 4 * t);
        if constexpr (kTiledOrder) {  // bf16: the scale in the weights, the MMAs accumulate in place
          const uint32_t sa = mx_scale_bf16x2(ss[g * kmx + mx], scale_base);
          const uint32_t sb = mx_scale_bf16x2(ss[(g + 8) * kmx + mx], scale_base);
          const uint32_t a0 = mul_bf16x2(pair_bf16x2<true, 0>(wa), sa),
                         a1 = mul_bf16x2(pair_bf16x2<true, 1>(wa), sa);
          const uint32_t a2 = mul_bf16x2(pair_bf16x2<true, 2>(wa), sa),
                         a3 = mul_bf16x2(pair_bf16x2<true, 3>(wa), sa);
          const uint32_t b0 = mul_bf16x2(pair_bf16x2<true, 0>(wb), sb),
                         b1 = mul_bf16x2(pair_bf16x2<true, 1>(wb), sb);
          const uint32_t b2 = mul_bf16x2(pair_bf16x2<true, 2>(wb), sb),
                         b3 = mul_bf16x2(pair_bf16x2<true, 3>(wb), sb);
#pragma unroll
          for (int nt = 0; nt < kNT; ++nt) {
            const int xr = min(nt * 8 + g, tile_rows - 1);
            const uint4 xb = *reinterpret_cast<const uint4*>(xs + xr * xstride + mx * 64 + t * 16);
            mma_m16n8k16_bf16(acc[nt], a0, b0, a1, b1, xb.x, xb.y);
            mma_m16n8k16_bf16(acc[nt], a2, b2, a3, b3, xb.z, xb.w);
          }
        } else {  // f16: the checkpoint's order, the scale on each block's fp32 partial sums
          const float sa = mx_scale(ss[g * kmx + mx]);
          const float sb = mx_scale(ss[(g + 8) * kmx + mx]);
          const uint32_t a0 = pair_f16x2<false, 0>(wa), a1 = pair_f16x2<false, 1>(wa);
          const uint32_t a2 = pair_f16x2<false, 2>(wa), a3 = pair_f16x2<false, 3>(wa);
          const uint32_t b0 = pair_f16x2<false, 0>(wb), b1 = pair_f16x2<false, 1>(wb);
          const uint32_t b2 = pair_f16x2<false, 2>(wb), b3 = pair_f16x2<false, 3>(wb);
#pragma unroll
          for (int nt = 0; nt < kNT; ++nt) {
            const int xr = min(nt * 8 + g, tile_rows - 1);
            const uint4 xb = *reinterpret_cast<const uint4*>(xs + xr * xstride + mx * 64 + t * 16);
            float part[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            mma_m16n8k16_f16(part, a0, b0, a1, b1, xb.x,
                             xb.y);  // k16 step 0: elements {0,4},{1,5} of each 8-group
            mma_m16n8k16_f16(part, a2, b2, a3, b3, xb.z, xb.w);  // k16 step 1: elements {2,6},{3,7}
            acc[nt][0] += part[0] * sa;
            acc[nt][1] += part[1] * sa;
            acc[nt][2] += part[2] * sb;
            acc[nt][3] += part[3] * sb;
          }
        }
      }
      __syncwarp();  // the stage is free for the copy issued at the next iteration
    }
    if (ks > 1) {  // the group's slices meet in its first warp, summed in slice order
      float* mine = red + warp * (kNT * 4 * 32);
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
        for (int q = 0; q < 4; ++q) mine[(nt * 4 + q) * 32 + lane] = acc[nt][q];
      asm volatile("bar.sync %0, %1;\n" ::"r"(1 + group), "r"(ks * 32));  // the group's warps only
      if (slice != 0) {
        cp_async_wait<0>();
        continue;
      }
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          float v = 0.0f;
          for (int s2 = 0; s2 < ks; ++s2) v += red[(warp + s2) * (kNT * 4 * 32) + (nt * 4 + q) * 32 + lane];
          acc[nt][q] = v;
        }
    }
    cp_async_wait<0>();
    pdl_launch_dependents();      // only the epilogue is left (kernels/common/pdl.cuh)
    if constexpr (kTiledOrder) {  // undo the bias the weights were scaled down by (exact: a power of two)
      const float unbias = __uint_as_float(uint32_t(127 + bias) << 23);
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
        for (int q = 0; q < 4; ++q) acc[nt][q] *= unbias;
    }

    if (p.swiglu_bias == nullptr) {
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const int tok = tok0 + nt * 8 + 2 * t + (q & 1);
          const int row = wrow0 + g + (q >> 1) * 8;
          if (tok < m && tok - tok0 < tile_rows)
            yg[(int64_t(row0) + tok) * n + row] = __float2bfloat16_rn(acc[nt][q]);
        }
      }
    } else {
      // Row g's partner row g^1 lives in lane ^ 4; even-g lanes hold a gate row and write z.
      const __nv_bfloat16* bias = static_cast<const __nv_bfloat16*>(p.swiglu_bias) + int64_t(e) * n;
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const float other = __shfl_xor_sync(0xffffffffu, acc[nt][q], 4);
          const int tok = tok0 + nt * 8 + 2 * t + (q & 1);
          const int row = wrow0 + g + (q >> 1) * 8;
          if ((g & 1) == 0 && tok < m && tok - tok0 < tile_rows) {
            const float gate = acc[nt][q] + __bfloat162float(bias[row]);
            const float up = other + __bfloat162float(bias[row + 1]);
            yg[(int64_t(row0) + tok) * (n / 2) + row / 2] =
                __float2bfloat16_rn(swiglu_fp32(gate, up, p.swiglu.limit, p.swiglu.alpha));
          }
        }
      }
    }
  }
  if (p.early_weights && !scales_loaded) pdl_wait();  // no pass ran (an expert without rows)
}

template <int kNT, int kWarps, int kStages, bool kTiledOrder, bool kStraight>
struct StreamingKernelTag {};

template <int kNT, int kWarps, int kStages, bool kTiledOrder, bool kStraight = false>
void launch_order(const Mxfp4GemmArgs& p, cudaStream_t stream) {
  const int bytes = smem_bytes(kNT, x_tile_rows(kNT, p.max_rows_per_expert), kWarps, kStages, p.k);
  ORCHID_KERNEL_REQUIRE(bytes <= device_info().max_smem_per_block_optin,
                        "mxfp4_moe_gemm: k too large for the shared tile");
  // Raised once per device to the opt-in limit (the launch's own size decides the occupancy).
  auto kernel = mxfp4_moe_gemm_kernel<kNT, kWarps, kStages, kTiledOrder, kStraight>;
  ensure_dynamic_smem<StreamingKernelTag<kNT, kWarps, kStages, kTiledOrder, kStraight>>(
      kernel, device_info().max_smem_per_block_optin);
  Mxfp4GemmArgs q = p;
  q.k_split = p.k_split ? p.k_split : (p.cta_warps ? 1 : mxfp4_stream_shape(p.n, p.max_active).k_split);
  ORCHID_KERNEL_REQUIRE(q.k_split >= 1 && kWarps % q.k_split == 0,
                        "mxfp4_moe_gemm: k_split must divide the CTA's warps");
  const int rows_per_cta = kWarps / q.k_split * kRowsPerWarp;
  const dim3 grid((p.n + rows_per_cta - 1) / rows_per_cta, p.max_active);
  launch_pdl(kernel, dim3(grid), dim3(kWarps * 32), bytes, stream, q);
  ORCHID_CUDA_CHECK_LAUNCH();
}

template <int kNT, int kWarps, int kStages>
void launch(const Mxfp4GemmArgs& p, cudaStream_t stream) {
  if (p.tiled_order && mxfp4_straight_chunks())  // the straight variant: the default (tiled) order only
    launch_order<kNT, kWarps, kStages, true, true>(p, stream);
  else if (p.tiled_order)
    launch_order<kNT, kWarps, kStages, true>(p, stream);
  else
    launch_order<kNT, kWarps, kStages, false>(p, stream);
}

template <int kNT>
void launch_config(const Mxfp4GemmArgs& p, cudaStream_t stream) {
  const int warps = p.cta_warps ? p.cta_warps : mxfp4_stream_shape(p.n, p.max_active).cta_warps;
  if (warps == 4) return launch<kNT, 4, kMxfp4StreamStages>(p, stream);
  if (warps == 8) return launch<kNT, 8, kMxfp4StreamStages>(p, stream);
  ORCHID_KERNEL_REQUIRE(false, "mxfp4_moe_gemm: cta_warps must be 4 or 8");
}

}  // namespace

namespace {
// ORCHID_MXFP4_STREAM=wWkK (e.g. w4k2) fixes the default shape for a whole process (benchmarks).
Mxfp4StreamShape forced_stream_shape() {
  static const Mxfp4StreamShape forced = [] {
    Mxfp4StreamShape s{0, 0};
    const char* e = std::getenv("ORCHID_MXFP4_STREAM");
    int w = 0, k = 0;
    if (e != nullptr && std::sscanf(e, "w%dk%d", &w, &k) == 2 && (w == 4 || w == 8) && k >= 1 && w % k == 0)
      s = {w, k};
    return s;
  }();
  return forced;
}
}  // namespace

Mxfp4StreamShape mxfp4_stream_shape(int n, int max_active) {
  if (const Mxfp4StreamShape f = forced_stream_shape(); f.cta_warps != 0) return f;
  // From moe_bench's sweep (bench/RESULTS.md, 2026-12-02 third run: 1-8 tokens an expert, gate_up and down
  // of gpt-oss): 8-warp CTAs once they fill three per multiprocessor, else 4-warp CTAs (twice the CTAs), and
  // those split k in two while they fill fewer than two per multiprocessor.
  const int sms = device_info().sm_count;
  const int64_t active = std::max(1, max_active);
  const int64_t ctas8 = (n + 127) / 128 * active, ctas4 = (n + 63) / 64 * active;
  Mxfp4StreamShape s;
  s.cta_warps = ctas8 >= 3 * sms ? 8 : 4;
  s.k_split = s.cta_warps == 4 && ctas4 < 2 * sms ? 2 : 1;
  return s;
}

void mxfp4_moe_gemm(const Mxfp4GemmArgs& p, cudaStream_t stream) {
  ORCHID_KERNEL_REQUIRE(p.n > 0 && p.n % 16 == 0, "mxfp4_moe_gemm: n must be a positive multiple of 16");
  ORCHID_KERNEL_REQUIRE(p.k > 0 && p.k % 32 == 0, "mxfp4_moe_gemm: k must be a positive multiple of 32");
  ORCHID_KERNEL_REQUIRE(p.offsets && p.active && p.num_active && p.blocks && p.scales && p.x && p.y,
                        "mxfp4_moe_gemm: null pointer");
  if (p.max_active <= 0) return;
  ORCHID_KERNEL_REQUIRE(p.max_active <= 65535, "mxfp4_moe_gemm: too many experts");
  ORCHID_KERNEL_REQUIRE(!p.tiled_order || p.num_experts > 0,
                        "mxfp4_moe_gemm: repacked blocks need num_experts (their chunks span the tensor)");
  if (p.max_rows_per_expert <= 8) {
    launch_config<1>(p, stream);
  } else {
    launch_config<2>(p, stream);
  }
}

}  // namespace orchid::kernels
