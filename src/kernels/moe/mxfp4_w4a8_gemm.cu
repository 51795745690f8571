// MXFP4 W4A8 expert GEMM (see mxfp4_w4a8_gemm.h).
//
// Napkin math, gpt-oss-20b prefill of 8192 tokens (1024 rows an expert, 32 experts), one layer: gate_up
// 2 * 32768 * 5760 * 2880 = 1.09 TFLOP, down 0.54: 1.2 ms at ~1330 TFLOP/s (FP8 dense), against the
// conversion path's 0.39 ms of conversion plus its FP8 GEMMs. Weight bytes are read once per token tile
// (four times at 1024 rows an expert), from L2 for all but the first.
//
// What bounds it: the dequantization. Per MX block a consumer warp places two words (its rows g and g + 8,
// 8 weights each) into e4m3 at 18 integer operations a word (mxfp4_order::to_e4m3x8) plus the table's two
// multiply-adds a row, and issues one wgmma m64nNk32 for its warpgroup's 64 rows x the tile's tokens. At
// 256 tokens that wgmma is 128 tensor cycles of the SM; two warpgroups' integer work (2 warps x 2 words x
// ~20 ops x 2 cycles a scheduler) is ~160 of their 256: the tile must be wide. (Where the tiled bf16 kernel
// should take over, a few hundred rows an expert, is for measurement: mxfp4_path keeps the conversion's
// crossover until then.)
//
// Persistent: one CTA an SM walks work items (128 weight rows x a tile of token rows). A CTA's main loop is
// ~13 us at 20b's k; its start (first copies, the rows' exponents) and its epilogue would otherwise not
// overlap anything (one CTA an SM: 232-register consumers), an estimated 10-20%. Here the producer copies
// the next item's scale tile and first stages while the consumers run the current item's epilogue, which
// leaves through a staging tile of its own (not the ring).
//
// Structure: 3 warpgroups. Warpgroups 0 and 1 (consumers, 232 registers: the 128 fp32 accumulators of
// m64n256) own 64 weight rows each; warpgroup 2's first thread is the producer (its warpgroup gives its
// registers back). The producer fills a ring of 4 stages of k 128 (4 MX blocks): the item's weights as one
// 4-D tensor copy of the repacked chunk (8 KB, 64-byte swizzle), the tile's 256 token rows as one 2-D copy
// of 128 bytes a row (32 KB, 128-byte swizzle: the K-major layout the wgmma descriptor reads), the item's
// MX scales once into one of two scale tiles. The repacked blocks are padded with zero blocks to whole
// chunks and the token copy zero-fills past k, so every stage runs all 4 blocks. Each consumer warp
// computes its rows' exponents c from the scales, then per MX block: two shared loads, the tables, the
// placement into the A registers, one wgmma; two register sets, so one block is placed while the previous
// block's wgmma runs. A stage goes back to the producer once the first wgmma of the next stage has been
// waited for behind it (an item's last stage, and its scale tile, once its last wgmma is done).
#include "kernels/moe/mxfp4_w4a8_gemm.h"

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "kernels/common/bulk_copy.cuh"
#include "kernels/common/cuda_check.h"
#include "kernels/common/device_info.h"
#include "kernels/common/pdl.cuh"
#include "kernels/common/smem_attribute.h"
#include "kernels/common/static_width.cuh"
#include "kernels/common/wgmma.cuh"
#include "kernels/common/wgmma_fp8.cuh"
#include "kernels/moe/mxfp4_tensor_maps.h"
#include "kernels/moe/mxfp4_word_order.h"

namespace orchid::kernels {
namespace {

namespace order = mxfp4_order;

constexpr int kRows = 128;                     // weight rows a CTA (two consumer warpgroups x 64)
constexpr int kTokens = kMxfp4W4a8TileTokens;  // token rows a tile
constexpr int kThreads = 384;                  // two consumer warpgroups + the producer's
constexpr int kWStageBytes = kRows * 64;       // 4 MX blocks of 16 bytes a row
constexpr int kXStageBytes = kTokens * 128;    // 128 e4m3 a token row
constexpr int kStageBytes = kWStageBytes + kXStageBytes;
constexpr int kStages = 4;
constexpr int kConsumerRegs = 232, kProducerRegs = 40;  // 2 x 128 x 232 + 128 x 40 <= 64 K
// The output tile's way out: z as [kTokens][kRows / 2 + 16] e4m3, or y as bf16 [kTokens / 2][kRows + 8]
// (half the tile's tokens at a time; the pads spread a warp's stores over the banks).
constexpr int kZPitch = kRows / 2 + 16, kYPitch = (kRows + 8) * 2;
constexpr int kStagingBytes = std::max(kTokens * kZPitch, kTokens / 2 * kYPitch);

__host__ __device__ constexpr int scale_bytes(int k) {
  return (kRows * (k / 32) + 15) / 16 * 16;
}
// Shared memory: the ring, the output staging, two scale tiles (the next work item's are copied while the
// current one's epilogue runs), the tile's token scales, the barriers.
constexpr int smem_bytes(int k) {
  return 1024 + kStages * kStageBytes + kStagingBytes + 2 * scale_bytes(k) + kTokens * 4 +
         (2 * kStages + 4) * 8;
}

// The two consumer warpgroups only (the producer's has returned).
__device__ __forceinline__ void consumer_sync() {
  asm volatile("bar.sync 1, 256;\n" ::: "memory");
}

__device__ __forceinline__ uint32_t lds32(const uint8_t* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}

// The table for d = s - c below -5 (rare: a block 12 binades under its row's largest): element by element.
// Returned by value: a reference would put the caller's table in local memory on every block.
__device__ __noinline__ uint2 e4m3_lut_slow(int d) {
  constexpr float kE2m1[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  uint32_t t[2] = {0, 0};
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const uint32_t b = __nv_cvt_float_to_fp8(ldexpf(kE2m1[i], d), __NV_SATFINITE, __NV_E4M3);
    t[i / 4] |= b << (8 * (i % 4));
  }
  return make_uint2(t[0], t[1]);
}

// One work item: 128 weight rows (from n0) of expert e x the tile's token rows from permuted row rbase.
struct WorkItem {
  int e, rbase, n0;
};
// Work item w (weight-row blocks fastest, launch()), or e < 0 for a tile past the plan's used ones.
__device__ __forceinline__ WorkItem work_item(const Mxfp4W4a8Args& p, int w, int row_blocks) {
  const int2 tile = reinterpret_cast<const int2*>(p.tiles)[w / row_blocks];
  WorkItem it;
  it.e = tile.x;
  it.rbase = tile.x < 0 ? 0 : p.offsets[tile.x] + tile.y;
  it.n0 = (w % row_blocks) * kRows;
  return it;
}

template <bool kSwiglu>
__global__ void __launch_bounds__(kThreads, 1)
    w4a8_kernel(Mxfp4W4a8Args p, const __grid_constant__ CUtensorMap wmap,
                const __grid_constant__ CUtensorMap xmap) {
  pdl_wait();  // programmatic dependent launch (kernels/common/pdl.cuh)
  extern __shared__ __align__(128) uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);

  const int n = p.n, k = p.k, kmx = k / 32;
  const int nchunks = order::grouped_kmx(kmx) / 4;
  const int row_blocks = (n + kRows - 1) / kRows;
  const int items = row_blocks * p.max_tiles;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  uint8_t* stile = smem + kStages * kStageBytes;                     // the output staging
  uint8_t* ss0 = stile + kStagingBytes;                              // scale tiles [2][kRows][kmx]
  float* s_xs = reinterpret_cast<float*>(ss0 + 2 * scale_bytes(k));  // [kTokens]
  uint64_t* full = reinterpret_cast<uint64_t*>(s_xs + kTokens);
  uint64_t* empty = full + kStages;
  uint64_t* scales_full = empty + kStages;   // [2]
  uint64_t* scales_empty = scales_full + 2;  // [2]

  if (tid == 0) {
    for (int i = 0; i < kStages; ++i) {
      mbar_init(&full[i], 1);
      mbar_init(&empty[i], 8);  // the consumer warps
    }
    for (int i = 0; i < 2; ++i) {
      mbar_init(&scales_full[i], 1);
      mbar_init(&scales_empty[i], 8);
    }
    mbar_init_fence();
  }
  __syncthreads();

  // Persistent: the CTA takes work items blockIdx.x, + gridDim.x, ... Producer and consumers walk the same
  // items; the ring's chunk count (cg) and the scale tiles (by the count of items taken, i) run on across
  // them, so the producer copies the next item's scales and first stages while the consumers finish the
  // current one.
  if (warp >= 8) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kProducerRegs));
    if (warp == 8 && lane == 0) {
      int cg = 0, i = 0;
      for (int w = blockIdx.x; w < items; w += gridDim.x) {
        const WorkItem it = work_item(p, w, row_blocks);
        if (it.e < 0) continue;
        const int sb = i & 1;
        if (i >= 2) mbar_wait_idle(&scales_empty[sb], ((i / 2) - 1) & 1);
        const uint32_t bytes = uint32_t(min(kRows, n - it.n0) * kmx);  // 16 * kmx * (rows / 16)
        mbar_arrive_expect_tx(&scales_full[sb], bytes);
        bulk_copy_g2s(ss0 + sb * scale_bytes(k), p.scales + (int64_t(it.e) * n + it.n0) * kmx, bytes,
                      &scales_full[sb]);
        const int wgroup0 = (it.e * n + it.n0) / 16;  // the item's first 16-row group in the weight map
        for (int c = 0; c < nchunks; ++c, ++cg) {
          const int st = cg % kStages;
          uint8_t* stage = smem + st * kStageBytes;
          if (cg >= kStages) mbar_wait_idle(&empty[st], ((cg / kStages) - 1) & 1);
          mbar_arrive_expect_tx(&full[st], kStageBytes);
          tensor_copy_4d(stage, &wmap, 0, 0, wgroup0, c, &full[st]);
          tensor_copy_2d(stage + kWStageBytes, &xmap, c * 128, it.rbase, &full[st]);
        }
        ++i;
      }
    }
    return;
  }
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kConsumerRegs));

  // This lane's rows in the CTA: ra (= g of the warp's m16 tile) and ra + 8.
  const int ra = 16 * warp + g;
  const int wsw = (g >> 1) & 3;  // 64-byte swizzle of rows ra and ra + 8
  // K-major token rows, 128-byte swizzle: 8-row groups 1024 bytes apart, an MX block = 32 bytes.
  const uint64_t desc0 = wgmma_desc(smem_addr(smem + kWStageBytes), 16, 1024, 1);

  int cg = 0, i = 0;
  for (int w = blockIdx.x; w < items; w += gridDim.x) {
    const WorkItem it = work_item(p, w, row_blocks);
    if (it.e < 0) continue;
    const int e = it.e, rbase = it.rbase, n0 = it.n0;
    const int m = min(p.offsets[e + 1] - rbase, kTokens);
    const int cta_rows = min(kRows, n - n0);  // a multiple of 16; rows past it compute and are dropped
    const int sb_i = i & 1;
    const uint8_t* ss = ss0 + sb_i * scale_bytes(k);
    const uint8_t* sa = ss + ra * kmx;
    const uint8_t* sb = ss + (ra + 8) * kmx;

    // Each row's exponent c = max s - 6: the four lanes of a row each take every fourth scale.
    mbar_wait(&scales_full[sb_i], (i / 2) & 1);
    int ca, cb;
    {
      uint32_t ma = 0, mb = 0;
      for (int q = t; q < kmx; q += 4) {
        ma = max(ma, uint32_t(sa[q]));
        mb = max(mb, uint32_t(sb[q]));
      }
#pragma unroll
      for (int o = 1; o < 4; o <<= 1) {
        ma = max(ma, __shfl_xor_sync(0xffffffffu, ma, o));
        mb = max(mb, __shfl_xor_sync(0xffffffffu, mb, o));
      }
      ca = int(ma) - 6;
      cb = int(mb) - 6;
    }
    uint32_t base_a0, base_a1, base_b0, base_b1;
    order::e4m3_lut_bases(ca, base_a0, base_a1);
    order::e4m3_lut_bases(cb, base_b0, base_b1);

    // One MX block's A registers: [0] row ra, k 4t..; [1] row ra + 8; [2] row ra, k 16 + 4t..; [3] row
    // ra + 8.
    auto place = [&](uint32_t(&a)[4], const uint8_t* wst, int j, int mx) {
      const uint32_t wa = lds32(wst + ra * 64 + ((j ^ wsw) * 16) + 4 * t);
      const uint32_t wb = lds32(wst + (ra + 8) * 64 + ((j ^ wsw) * 16) + 4 * t);
      const int s_a = sa[mx], s_b = sb[mx];
      uint32_t ta0, ta1, tb0, tb1;
      order::e4m3_lut(uint32_t(s_a), base_a0, base_a1, ta0, ta1);
      order::e4m3_lut(uint32_t(s_b), base_b0, base_b1, tb0, tb1);
      if (s_a - ca < -5) {
        const uint2 u = e4m3_lut_slow(s_a - ca);
        ta0 = u.x;
        ta1 = u.y;
      }
      if (s_b - cb < -5) {
        const uint2 u = e4m3_lut_slow(s_b - cb);
        tb0 = u.x;
        tb1 = u.y;
      }
      order::to_e4m3x8(wa, ta0, ta1, a[0], a[2]);
      order::to_e4m3x8(wb, tb0, tb1, a[1], a[3]);
    };

    constexpr int kMaxAcc = kTokens / 2;  // m64n256: 128 fp32 a thread
    float acc[kMaxAcc];
#pragma unroll
    for (int q = 0; q < kMaxAcc; ++q) acc[q] = 0.0f;

    auto run = [&](auto v) {
      constexpr int kN = 64 * decltype(v)::value;  // token columns the MMAs cover
      uint32_t a[2][4];
      fence_operands(acc);
      for (int c = 0; c < nchunks; ++c) {
        const int st = (cg + c) % kStages;
        mbar_wait(&full[st], ((cg + c) / kStages) & 1);
        const uint8_t* wst = smem + st * kStageBytes;
        const uint64_t desc = wgmma_desc_advance(desc0, uint32_t(st * kStageBytes));
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          place(a[j & 1], wst, j, 4 * c + j);
          wgmma_fence();
          wgmma_e4m3_rs<kN>(acc, a[j & 1], wgmma_desc_advance(desc, uint32_t(32 * j)), 1);
          wgmma_commit();
          wgmma_wait<1>();  // the previous block's group is done: its registers may be placed again
          if (j == 0 && c > 0) {
            // ... and with it every wgmma that read the previous stage.
            __syncwarp();
            if (lane == 0) mbar_arrive(&empty[(cg + c - 1) % kStages]);
          }
        }
      }
      wgmma_wait<0>();
      fence_operands(acc);
    };
    with_used_tiles<kTokens / 64>((m + 63) / 64, run);  // wgmma widths 64, 128, 192, 256
    // The item's last stage and its scale tile go back to the producer (the epilogue reads neither).
    __syncwarp();
    if (lane == 0) {
      mbar_arrive(&empty[(cg + nchunks - 1) % kStages]);
      mbar_arrive(&scales_empty[sb_i]);
    }
    cg += nchunks;
    ++i;
    pdl_launch_dependents();  // only epilogues are left once every CTA is here (kernels/common/pdl.cuh)

    // 2^(c - 127) for rows ra and ra + 8 (c >= -6: a normal or subnormal float, never zero).
    const float fa = ldexpf(1.0f, ca - 127), fb = ldexpf(1.0f, cb - 127);
    // The tile goes out through the staging tile as rows of tokens: written there element by element in
    // the accumulator layout, copied out in 16-byte pieces (the accumulators hold 8 weight rows x 4 tokens
    // a warp store: 2-byte pieces of 4 token rows). The epilogue's instructions count (the producer
    // overlaps only its copies with it): the tile's token scales are staged once in shared memory, and
    // per-row values are hoisted out of the loops (measured 2026-12-07: the first form, ~20 K instructions
    // a warp for the SwiGLU epilogue, made gate_up's CTAs 2.2x as long as down's).
    s_xs[tid] = p.x_scale ? p.x_scale[rbase + min(tid, m - 1)] : p.x_scale_all;  // tid < 256 = kTokens
    // Both warpgroups are past the last item's copy-out (the staging tile is free) and the scales staged.
    consumer_sync();
    if constexpr (!kSwiglu) {
      __nv_bfloat16* y = static_cast<__nv_bfloat16*>(p.y);
      constexpr int kPieces = kRows * 2 / 16;  // 16-byte pieces a token row
      const int pieces = cta_rows * 2 / 16;
      uint8_t* row_a = stile + ra * 2;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int tok0 = half * (kTokens / 2);
        if (tok0 >= m) break;
        if (half > 0) consumer_sync();  // the first half's copy-out is done with the staging tile
#pragma unroll
        for (int q = 0; q < kTokens / 16; ++q) {
          const int nt = half * (kTokens / 16) + q;
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int tok = nt * 8 + 2 * t + h;
            if (tok < m) {
              const float xs = s_xs[tok];
              uint8_t* dst = row_a + (tok - tok0) * kYPitch;
              *reinterpret_cast<__nv_bfloat16*>(dst) = __float2bfloat16_rn(acc[4 * nt + h] * (xs * fa));
              *reinterpret_cast<__nv_bfloat16*>(dst + 16) =
                  __float2bfloat16_rn(acc[4 * nt + 2 + h] * (xs * fb));
            }
          }
        }
        consumer_sync();
        const int rows = min(m - tok0, kTokens / 2);
        for (int q = tid; q < rows * kPieces; q += 256) {
          const int tok = q / kPieces, c = q % kPieces;
          if (c < pieces)
            *reinterpret_cast<uint4*>(y + (int64_t(rbase) + tok0 + tok) * n + n0 + 8 * c) =
                *reinterpret_cast<const uint4*>(stile + tok * kYPitch + 16 * c);
        }
      }
    } else {
      // Rows 2i / 2i + 1 (gate / up of z column i) sit in lanes l / l ^ 4 (g even / odd). For each token
      // pair (2t, 2t + 1) and row half h the two lanes swap one value, so the even lane holds (gate, up) of
      // token 2t and the odd lane those of token 2t + 1: both lanes apply SwiGLU, one shuffle for two
      // outputs. z goes into [token][kZPitch] bytes at its W4A8 position (the CTA's z columns start at
      // n0 / 2, a multiple of 64: whole MX blocks).
      const bool odd = (g & 1) != 0;
      const int tok_off = 2 * t + (odd ? 1 : 0);
      const __nv_bfloat16* b1 = static_cast<const __nv_bfloat16*>(p.swiglu_bias) + int64_t(e) * n;
      const float inv_z = 1.0f / p.z_scale;  // a power of two: exact
      const float limit = p.swiglu.limit, alpha = p.swiglu.alpha;
      float bias_gate[2], bias_up[2], frow[2] = {fa, fb};
      int zpos[2];
      bool zvalid[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int gate_row = (ra & ~1) + 8 * h;  // in the CTA
        const int zi = gate_row / 2;
        zvalid[h] = n0 + gate_row < n;
        bias_gate[h] = zvalid[h] ? __bfloat162float(b1[n0 + gate_row]) : 0.0f;
        bias_up[h] = zvalid[h] ? __bfloat162float(b1[n0 + gate_row + 1]) : 0.0f;
        zpos[h] = (zi & ~31) + order::w4a8_pos(zi & 31);
      }
#pragma unroll
      for (int nt = 0; nt < kTokens / 8; ++nt) {
        const float xs0 = s_xs[nt * 8 + 2 * t], xs1 = s_xs[nt * 8 + 2 * t + 1];
        const int tok = nt * 8 + tok_off;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const float v0 = acc[4 * nt + 2 * h] * (xs0 * frow[h]);      // token 2t
          const float v1 = acc[4 * nt + 2 * h + 1] * (xs1 * frow[h]);  // token 2t + 1
          // Even lane: keeps its gate of 2t, sends its gate of 2t + 1; odd lane: keeps its up of 2t + 1,
          // sends its up of 2t.
          const float recv = __shfl_xor_sync(0xffffffffu, odd ? v0 : v1, 4);
          const float gate = (odd ? recv : v0) + bias_gate[h];
          const float up = (odd ? v1 : recv) + bias_up[h];
          if (zvalid[h] && tok < m) {
            const float gc = fminf(gate, limit);
            const float uc = fminf(fmaxf(up, -limit), limit);
            // SwiGLU with the fast exponential and division: their ~1e-6 relative error is far below
            // e4m3's.
            const float zv = gc * __fdividef(1.0f, 1.0f + __expf(-alpha * gc)) * (uc + 1.0f) * inv_z;
            stile[tok * kZPitch + zpos[h]] = __nv_cvt_float_to_fp8(zv, __NV_SATFINITE, __NV_E4M3);
          }
        }
      }
      consumer_sync();
      uint8_t* z = static_cast<uint8_t*>(p.y);
      const int zn = n / 2;
      constexpr int kPieces = kRows / 2 / 16;
      const int pieces = cta_rows / 2 / 16;
      for (int q = tid; q < m * kPieces; q += 256) {
        const int tok = q / kPieces, c = q % kPieces;
        if (c < pieces)
          *reinterpret_cast<uint4*>(z + (int64_t(rbase) + tok) * zn + n0 / 2 + 16 * c) =
              *reinterpret_cast<const uint4*>(stile + tok * kZPitch + 16 * c);
      }
    }
  }
}

// A block a row: the row's amax (16-byte loads, 8 columns a thread-step), then the quantized bytes, each
// 8-column group (elements 8t..8t+7 of an MX block) as two words at their W4A8 positions 4t and 16 + 4t.
constexpr int kActThreads = 128;
__global__ void __launch_bounds__(kActThreads)
    w4a8_activation_kernel(const uint4* __restrict__ x, const int* __restrict__ row_map, int k,
                           uint8_t* __restrict__ out, float* __restrict__ scale) {
  pdl_wait();  // programmatic dependent launch (kernels/common/pdl.cuh)
  const int r = blockIdx.x;
  const int src = row_map ? row_map[r] : r;
  const int groups = k / 8;
  const uint4* row = x + int64_t(src) * groups;
  float amax = 0.0f;
  for (int q = threadIdx.x; q < groups; q += kActThreads) {
    const uint4 v = row[q];
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i)
      amax =
          fmaxf(amax, fmaxf(fabsf(__uint_as_float(w[i] << 16)), fabsf(__uint_as_float(w[i] & 0xffff0000u))));
  }
  __shared__ float red[kActThreads / 32];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = amax;
  __syncthreads();
  amax = red[0];
#pragma unroll
  for (int i = 1; i < kActThreads / 32; ++i) amax = fmaxf(amax, red[i]);
  const float s = amax > 0.0f ? amax / 448.0f : 1.0f;
  const float inv = amax > 0.0f ? 448.0f / amax : 1.0f;
  if (threadIdx.x == 0) scale[r] = s;
  uint8_t* orow = out + int64_t(r) * k;
  for (int q = threadIdx.x; q < groups; q += kActThreads) {
    const uint4 v = row[q];
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
    float f[8];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      f[2 * i] = __uint_as_float(w[i] << 16) * inv;
      f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u) * inv;
    }
    auto pack = [&](const int(&el)[4]) {
      uint32_t word = 0;
#pragma unroll
      for (int j = 0; j < 4; ++j)
        word |= uint32_t(__nv_cvt_float_to_fp8(f[el[j]], __NV_SATFINITE, __NV_E4M3)) << (8 * j);
      return word;
    };
    constexpr int kLo[4] = {order::kW4a8Lo[0], order::kW4a8Lo[1], order::kW4a8Lo[2], order::kW4a8Lo[3]};
    constexpr int kHi[4] = {order::kW4a8Hi[0], order::kW4a8Hi[1], order::kW4a8Hi[2], order::kW4a8Hi[3]};
    const int mx = q / 4, tq = q % 4;
    uint32_t* o = reinterpret_cast<uint32_t*>(orow + mx * 32);
    o[tq] = pack(kLo);
    o[4 + tq] = pack(kHi);
  }
}

struct W4a8Tag {};
struct W4a8SwigluTag {};

template <bool kSwiglu>
void launch(const Mxfp4W4a8Args& p, cudaStream_t stream) {
  const int bytes = smem_bytes(p.k);
  ORCHID_KERNEL_REQUIRE(bytes <= device_info().max_smem_per_block_optin,
                        "mxfp4_w4a8_gemm: k too large for the two shared scale tiles");
  auto kernel = w4a8_kernel<kSwiglu>;
  ensure_dynamic_smem<std::conditional_t<kSwiglu, W4a8SwigluTag, W4a8Tag>>(
      kernel, device_info().max_smem_per_block_optin);
  // Work item w is weight-row block w % row_blocks of tile w / row_blocks: the blocks of a tile vary
  // fastest, so the CTAs running together share the tile's token rows (read from DRAM once, then from L2)
  // and an expert's weights (~9 MB for 20b's gate_up, reused from L2 by its next tiles). Tiles fastest
  // would stream all tiles' token rows (94 MB at an 8k 20b prefill, past L2) again for every block of
  // weight rows. The persistent CTAs (one an SM) take items gridDim.x apart, so at any time they run about
  // one SM count of consecutive items, as a grid of one CTA an item would.
  const int64_t items = int64_t((p.n + kRows - 1) / kRows) * p.max_tiles;
  ORCHID_KERNEL_REQUIRE(items <= INT32_MAX, "mxfp4_w4a8_gemm: too many work items");
  const int ctas = p.max_ctas > 0 ? p.max_ctas : device_info().sm_count;
  const dim3 grid(unsigned(std::min<int64_t>(items, std::max(ctas, 1))));
  const CUtensorMap wmap = mxfp4_repacked_weight_map(p.blocks, p.num_experts, p.n, p.k, kRows);
  const CUtensorMap xmap =
      mxfp4_byte_tensor_map(p.x, uint64_t(p.x_row_count), uint64_t(p.k), 128, kTokens,
                            CU_TENSOR_MAP_SWIZZLE_128B, "mxfp4_w4a8_gemm: the token rows");
  launch_pdl(kernel, grid, dim3(kThreads), size_t(bytes), stream, p, wmap, xmap);
}

}  // namespace

float mxfp4_w4a8_z_scale(const SwigluParams& sp) {
  if (!(sp.limit > 0.0f) || !std::isfinite(sp.limit) || !(sp.alpha > 0.0f)) return 0.0f;
  // |g * sigmoid(alpha g)| <= max(limit, 0.2785 / alpha) for g <= limit; |clamped up + 1| <= limit + 1.
  const double bound = std::max(double(sp.limit), 0.2785 / double(sp.alpha)) * (double(sp.limit) + 1.0);
  return float(std::ldexp(1.0, int(std::ceil(std::log2(bound / 448.0)))));
}

void mxfp4_w4a8_activation(const void* x, int rows, int k, uint8_t* out, float* scale, cudaStream_t stream,
                           const int* row_map) {
  ORCHID_KERNEL_REQUIRE(k % 32 == 0, "mxfp4_w4a8_activation: k must be a multiple of 32");
  ORCHID_KERNEL_REQUIRE(x && out && scale, "mxfp4_w4a8_activation: null pointer");
  if (rows <= 0) return;
  launch_pdl(w4a8_activation_kernel, dim3(unsigned(rows)), dim3(kActThreads), 0, stream,
             static_cast<const uint4*>(x), row_map, k, out, scale);
  ORCHID_CUDA_CHECK_LAUNCH();
}

void mxfp4_w4a8_gemm(const Mxfp4W4a8Args& p, cudaStream_t stream) {
  ORCHID_KERNEL_REQUIRE(p.n > 0 && p.n % 16 == 0, "mxfp4_w4a8_gemm: n must be a positive multiple of 16");
  ORCHID_KERNEL_REQUIRE(p.k > 0 && p.k % 32 == 0, "mxfp4_w4a8_gemm: k must be a positive multiple of 32");
  ORCHID_KERNEL_REQUIRE(p.offsets && p.tiles && p.blocks && p.scales && p.x && p.y,
                        "mxfp4_w4a8_gemm: null pointer");
  ORCHID_KERNEL_REQUIRE(!p.swiglu_bias || p.n % 64 == 0,
                        "mxfp4_w4a8_gemm: the SwiGLU output (n / 2 columns) must be whole MX blocks");
  ORCHID_KERNEL_REQUIRE(!p.swiglu_bias || p.z_scale > 0.0f,
                        "mxfp4_w4a8_gemm: the SwiGLU output needs a finite clamp (mxfp4_w4a8_z_scale)");
  ORCHID_KERNEL_REQUIRE(p.x_row_count > 0 || p.max_tiles <= 0,
                        "mxfp4_w4a8_gemm: x_row_count must count the rows of x");
  ORCHID_KERNEL_REQUIRE((reinterpret_cast<uintptr_t>(p.x) | reinterpret_cast<uintptr_t>(p.blocks) |
                         reinterpret_cast<uintptr_t>(p.scales)) %
                                16 ==
                            0,
                        "mxfp4_w4a8_gemm: x, blocks and scales must be 16-byte aligned");
  if (p.max_tiles <= 0) return;
  if (p.swiglu_bias)
    launch<true>(p, stream);
  else
    launch<false>(p, stream);
}

}  // namespace orchid::kernels
