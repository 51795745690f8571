// MXFP4 x FP8 expert GEMM on wgmma (see mxfp4_w4a8_gemm.h).
//
// Napkin math, gpt-oss-20b decode at batch 64 (256 routed rows, ~8 per expert, all 32 experts used), one
// layer: 32 experts x (5760 + 2880) x 2880 x 17/32 B = 423 MB -> 88 us at 4.8 TB/s, 2.1 ms for 24 layers
// (the bf16 tiled kernel takes ~5 ms there: instruction bound). Per MX block a thread of a warpgroup turns
// 16 weights into e4m3 (2 shared loads, 7 ALU ops per 8 weights), issues one wgmma for all the tile's tokens
// and adds tile_tokens / 2 products of the block's scale into its fp32 sums; the bf16 kernel spends ~44
// issue slots on the same 16 weights plus 3 per 8 tokens.
//
// Structure: CTA = 2 warpgroups = 128 weight rows of one expert x tile_tokens token rows; each warpgroup owns
// 64 rows (one m64 wgmma per MX block). All threads copy with cp.async into a 4-stage ring of 4 MX blocks
// (k 128) of the weight rows and the token rows; the MX scales of the CTA's rows come with the first stage.
// Per MX block: dequantize into one of two register sets, wgmma into one of two result sets (overwriting),
// then wait for the previous block's wgmma and add its result times its scale into the sums, so the ALU work
// of block j overlaps the tensor cores' work on block j - 1.
//
// Layouts. A (weights, registers; warp w of the warpgroup has rows 16w..16w+15, g = lane/4, t = lane%4):
// a0 = row g, k slots 4t..4t+3; a1 = row g+8, same slots; a2 = row g, slots 16+4t..16+4t+3; a3 = row g+8.
// Lane t reads bytes 4t..4t+3 of its rows' 16-byte MX block (elements 8t..8t+7, element 8t+i in nibble i)
// and puts the even elements into a0/a1 and the odd ones into a2/a3: slot s < 16 holds element 2s, slot
// 16 + s element 2s + 1. The activations are stored in that order (mxfp4_w4a8_quantize), so the products
// pair up. B (tokens, shared memory, K-major, no swizzle): per MX block a region of tile_tokens x 32 bytes,
// 8-token x 16-byte core matrices of 128 contiguous bytes, the two k halves 128 bytes apart (leading byte
// offset) and 8-token groups 256 bytes apart (stride byte offset). D: d[4i + e] = row g (e < 2) or g + 8,
// token 8i + 2t + (e & 1): the mma.sync m16n8 layout per 8 tokens.
//
// e2m1 -> e4m3: the nibble's sign goes to bit 7 and its three magnitude bits (e1 e0 m) to bits 4..2, i.e.
// the exponent field's two low bits and the mantissa msb. Exponent e >= 1 gives 2^(e-7) (1 + m/2), e = 0 the
// subnormal m * 2^-7: exactly the e2m1 value times 2^-6 in both cases (the epilogue multiplies by 2^6).
#include "kernels/moe/mxfp4_w4a8_gemm.h"

#include <cuda_bf16.h>

#include <algorithm>

#include "kernels/common/cuda_check.h"
#include "kernels/common/device_info.h"
#include "kernels/common/pdl.cuh"
#include "kernels/common/quant.cuh"
#include "kernels/common/smem_attribute.h"
#include "kernels/common/wgmma.cuh"
#include "kernels/moe/mxfp4_mma.cuh"
#include "kernels/moe/swiglu.cuh"

namespace orchid::kernels {
namespace {

using mxfp4_detail::cp_async_16;
using mxfp4_detail::cp_async_commit;
using mxfp4_detail::cp_async_wait;

constexpr int kThreads = 256;  // two warpgroups
constexpr int kRowsPerWarpgroup = 64;
constexpr int kRowsPerCta = 2 * kRowsPerWarpgroup;
constexpr int kChunkMx = 4;  // MX blocks (of 32 k) per pipeline stage
constexpr int kStages = 4;
constexpr int kWRowBytes =
    kChunkMx * 16 + 16;  // a weight row of a stage, padded: the lanes' loads hit distinct banks
constexpr int kWStageBytes = kRowsPerCta * kWRowBytes;

constexpr int stage_bytes(int tokens) {
  return kWStageBytes + tokens * kChunkMx * 32;
}
constexpr int scale_bytes(int k) {
  return (kRowsPerCta * (k / 32) + 15) / 16 * 16;
}
constexpr int smem_bytes(int tokens, int k) {
  return kStages * stage_bytes(tokens) + scale_bytes(k);
}

// Nibbles 0, 2, 4, 6 (elements 8t, 8t+2, 8t+4, 8t+6) of w -> four e4m3 bytes (value * 2^-6).
__device__ __forceinline__ uint32_t e2m1_even_to_e4m3x4(uint32_t w) {
  return ((w << 2) & 0x1c1c1c1cu) | ((w << 4) & 0x80808080u);
}
// Nibbles 1, 3, 5, 7 -> four e4m3 bytes (value * 2^-6).
__device__ __forceinline__ uint32_t e2m1_odd_to_e4m3x4(uint32_t w) {
  return ((w >> 2) & 0x1c1c1c1cu) | (w & 0x80808080u);
}

// 2^(s-127) for an e8m0 scale s in 1..254 (s = 0 gives 0 instead of 2^-127, s = 255 infinity).
__device__ __forceinline__ float e8m0_to_float_fast(uint32_t s) {
  return __uint_as_float(s << 23);
}

// d = A * B (the previous contents are overwritten), m64 x (8 kNT) x k32, e4m3 inputs, fp32 results.
template <int kNT>
__device__ __forceinline__ void wgmma_e4m3(float (&d)[4 * kNT], const uint32_t (&a)[4], uint64_t desc_b);

template <>
__device__ __forceinline__ void wgmma_e4m3<1>(float (&d)[4], const uint32_t (&a)[4], uint64_t desc_b) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %9, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, %8, p, 1, 1;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(0));
}

template <>
__device__ __forceinline__ void wgmma_e4m3<2>(float (&d)[8], const uint32_t (&a)[4], uint64_t desc_b) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %13, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n16k32.f32.e4m3.e4m3 "
      "{%0, %1, %2, %3, %4, %5, %6, %7}, {%8, %9, %10, %11}, %12, p, 1, 1;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(0));
}

template <>
__device__ __forceinline__ void wgmma_e4m3<4>(float (&d)[16], const uint32_t (&a)[4], uint64_t desc_b) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %21, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k32.f32.e4m3.e4m3 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
      "{%16, %17, %18, %19}, %20, p, 1, 1;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(0));
}

__device__ __forceinline__ uint32_t lds32(const uint8_t* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}

template <int kNT, bool kSwiglu>
__global__ void __launch_bounds__(kThreads, 2) mxfp4_w4a8_kernel(Mxfp4W4a8Args p) {
  pdl_wait();  // programmatic dependent launch (kernels/common/pdl.cuh)
  constexpr int kTokens = 8 * kNT, kStageBytes = stage_bytes(kTokens);
  constexpr int kTokBlockBytes = kTokens * 32;      // one MX block of the token rows
  constexpr int kTokSegs = kTokens * kChunkMx * 2;  // 16-byte token segments per stage
  constexpr int kWSegs = kRowsPerCta * kChunkMx;    // 16-byte weight segments per stage
  constexpr int kWPerThread = kWSegs / kThreads;
  static_assert(kWSegs % kThreads == 0 && kTokSegs <= kThreads, "copy assignment");
  extern __shared__ __align__(128) uint8_t smem[];

  const int2 tile = reinterpret_cast<const int2*>(p.tiles)[blockIdx.x];
  const int e = tile.x;
  if (e < 0) return;
  const int rbase = p.offsets[e] + tile.y;
  const int m = min(p.offsets[e + 1] - rbase, kTokens);
  const int n = p.n, k = p.k, kmx = k / 32, nchunks = (kmx + kChunkMx - 1) / kChunkMx;
  const int n0 = blockIdx.y * kRowsPerCta;
  const int cta_rows = min(kRowsPerCta, n - n0);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int wg = warp / 4;
  const bool wg_active = cta_rows > wg * kRowsPerWarpgroup;        // warpgroup-uniform
  const int wrow0 = wg * kRowsPerWarpgroup + (warp % 4) * 16 + g;  // this lane's rows: wrow0, wrow0 + 8

  uint8_t* ss = smem + kStages * kStageBytes;  // scales [cta_rows][kmx]
  {
    const uint8_t* sg =
        p.scales + (int64_t(e) * n + n0) * kmx;  // 16-byte aligned: n0 % 128 == 0, n % 16 == 0
    for (int i = tid; i < cta_rows * kmx / 16; i += kThreads) cp_async_16(ss + 16 * i, sg + 16 * i, true);
  }

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
  // One 16-byte token segment per thread (tid < kTokSegs): token i, k piece jh (block jh / 2, half jh % 2).
  const int ti = tid / (kChunkMx * 2), tjh = tid % (kChunkMx * 2);
  const bool tcopy = tid < kTokSegs;
  const bool tvalid = tcopy && ti < m;
  const int tdst = (tjh / 2) * kTokBlockBytes + (ti / 8) * 256 + (tjh % 2) * 128 + (ti % 8) * 16;
  const uint8_t* tsrc = p.x;
  if (tvalid) tsrc = p.x + int64_t(p.x_rows ? p.x_rows[rbase + ti] : rbase + ti) * k + tjh * 16;

  auto issue = [&](int c) {
    if (c < nchunks) {
      uint8_t* st = smem + (c % kStages) * kStageBytes;
#pragma unroll
      for (int q = 0; q < kWPerThread; ++q) {
        const bool v = wvalid[q] && kChunkMx * c + wmx[q] < kmx;
        cp_async_16(st + wdst[q], v ? wsrc[q] + c * (kChunkMx * 16) : p.blocks, v);
      }
      if (tcopy) {
        const bool v = tvalid && c * (kChunkMx * 32) + tjh * 16 < k;
        cp_async_16(st + kWStageBytes + tdst, v ? tsrc + c * (kChunkMx * 32) : p.x, v);
      }
    }
    cp_async_commit();  // empty groups too: the wait below counts groups
  };

#pragma unroll
  for (int c = 0; c < kStages - 1; ++c) issue(c);

  float acc[4 * kNT];
#pragma unroll
  for (int i = 0; i < 4 * kNT; ++i) acc[i] = 0.0f;
  float part[2][4 * kNT];
#pragma unroll
  for (int i = 0; i < 4 * kNT; ++i) part[0][i] = part[1][i] = 0.0f;
  uint32_t a[2][4];
  // Rows past n hold zeros (zero-filled copies); their scale rows are clamped into the CTA's.
  const uint8_t* srow0 = ss + min(wrow0, cta_rows - 1) * kmx;
  const uint8_t* srow1 = ss + min(wrow0 + 8, cta_rows - 1) * kmx;
  const uint32_t tok_base = uint32_t(__cvta_generic_to_shared(smem)) + kWStageBytes;

  // Adds part * (its MX block's scale) into the sums; mx clamped into the row (blocks past k are zeros).
  auto consume = [&](const float(&pr)[4 * kNT], int mx) {
    mx = min(mx, kmx - 1);
    const float s0 = e8m0_to_float_fast(srow0[mx]), s1 = e8m0_to_float_fast(srow1[mx]);
#pragma unroll
    for (int i = 0; i < kNT; ++i) {
      acc[4 * i + 0] = fmaf(pr[4 * i + 0], s0, acc[4 * i + 0]);
      acc[4 * i + 1] = fmaf(pr[4 * i + 1], s0, acc[4 * i + 1]);
      acc[4 * i + 2] = fmaf(pr[4 * i + 2], s1, acc[4 * i + 2]);
      acc[4 * i + 3] = fmaf(pr[4 * i + 3], s1, acc[4 * i + 3]);
    }
  };

  for (int c = 0; c < nchunks; ++c) {
    cp_async_wait<kStages - 2>();  // chunk c (and the scales) of this thread have landed
    fence_proxy_async_smem();      // ... visible to the tensor cores' reads
    __syncthreads();               // ... of every thread; chunk c - 1's stage is free again
    issue(c + kStages - 1);
    if (!wg_active) continue;
    const uint8_t* wst = smem + (c % kStages) * kStageBytes + wrow0 * kWRowBytes + 4 * t;
    const uint32_t tst = tok_base + uint32_t((c % kStages) * kStageBytes);
#pragma unroll
    for (int j = 0; j < kChunkMx; ++j) {
      const uint32_t wa = lds32(wst + j * 16), wb = lds32(wst + 8 * kWRowBytes + j * 16);
      uint32_t(&aj)[4] = a[j & 1];
      aj[0] = e2m1_even_to_e4m3x4(wa);
      aj[1] = e2m1_even_to_e4m3x4(wb);
      aj[2] = e2m1_odd_to_e4m3x4(wa);
      aj[3] = e2m1_odd_to_e4m3x4(wb);
      wgmma_fence();
      wgmma_e4m3<kNT>(part[j & 1], aj, wgmma_desc(tst + j * kTokBlockBytes, 128, 256, 0));
      wgmma_commit();
      if (j > 0) {
        wgmma_wait<1>();  // block j - 1 is done
        fence_operands(part[(j - 1) & 1]);
        consume(part[(j - 1) & 1], kChunkMx * c + j - 1);
      }
    }
    wgmma_wait<0>();  // the stage is read before the next barrier lets it be refilled
    fence_operands(part[(kChunkMx - 1) & 1]);
    consume(part[(kChunkMx - 1) & 1], kChunkMx * c + kChunkMx - 1);
  }
  cp_async_wait<0>();
  pdl_launch_dependents();  // only the epilogue is left (kernels/common/pdl.cuh)
  if (!wg_active) return;
  const int warp_rows = cta_rows - (wrow0 - g);  // rows of this warp's 16 that exist (warp-uniform)
  if (warp_rows <= 0) return;

  // The lane's tokens: 8i + 2t + (0, 1); their activation scales times the placement's 2^6.
  float tscale[2 * kNT];
#pragma unroll
  for (int i = 0; i < kNT; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int tok = 8 * i + 2 * t + h;
      float s = 0.0f;
      if (tok < m) s = 64.0f * p.x_scale[p.x_rows ? p.x_rows[rbase + tok] : rbase + tok];
      tscale[2 * i + h] = s;
    }
  if constexpr (!kSwiglu) {
    __nv_bfloat16* y = static_cast<__nv_bfloat16*>(p.y);
#pragma unroll
    for (int i = 0; i < kNT; ++i)
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int tok = 8 * i + 2 * t + (q & 1);
        const int r = wrow0 + (q >> 1) * 8;
        if (tok < m && r < cta_rows)
          y[(int64_t(rbase) + tok) * n + n0 + r] =
              __float2bfloat16_rn(acc[4 * i + q] * tscale[2 * i + (q & 1)]);
      }
  } else {
    // Row g's partner row g^1 lives in lane ^ 4; even-g lanes hold a gate row and write z[r / 2].
    const __nv_bfloat16* b1 = static_cast<const __nv_bfloat16*>(p.swiglu_bias) + int64_t(e) * n;
    __nv_bfloat16* z = static_cast<__nv_bfloat16*>(p.y);
    const int zn = n / 2;
#pragma unroll
    for (int i = 0; i < kNT; ++i)
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const float v = acc[4 * i + q] * tscale[2 * i + (q & 1)];
        const float other = __shfl_xor_sync(0xffffffffu, v, 4);
        const int tok = 8 * i + 2 * t + (q & 1);
        const int r = wrow0 + (q >> 1) * 8;
        if ((g & 1) == 0 && tok < m && r < cta_rows) {
          const int row = n0 + r;
          const float gate = v + __bfloat162float(b1[row]);
          const float up = other + __bfloat162float(b1[row + 1]);
          z[(int64_t(rbase) + tok) * zn + row / 2] =
              __float2bfloat16_rn(swiglu_fp32(gate, up, p.swiglu.limit, p.swiglu.alpha));
        }
      }
  }
}

// One warp per row: the row's amax, then each lane quantizes whole 32-column blocks into W4A8 order
// (bf16 word i of a block holds columns 2i and 2i+1: the low half goes to slot i, the high half to 16 + i).
__global__ void __launch_bounds__(256)
    w4a8_quantize_kernel(const uint4* __restrict__ x, const int* __restrict__ row_map, int rows, int k,
                         uint8_t* __restrict__ q, float* __restrict__ scale) {
  pdl_wait();
  const int row = blockIdx.x * 8 + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= rows) return;
  const int src = row_map ? row_map[row] : row;
  const uint4* xr = x + int64_t(src) * (k / 8);
  const int nblk = k / 32;
  float amax = 0.0f;
  for (int b = lane; b < nblk; b += 32)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint4 v = xr[4 * b + i];
      const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int j = 0; j < 4; ++j)
        amax = fmaxf(amax,
                     fmaxf(fabsf(__uint_as_float(w[j] << 16)), fabsf(__uint_as_float(w[j] & 0xffff0000u))));
    }
#pragma unroll
  for (int o = 16; o > 0; o /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const Fp8GroupScale sc = fp8_group_scale(amax);
  pdl_launch_dependents();
  uint4* qr = reinterpret_cast<uint4*>(q + int64_t(row) * k);
  for (int b = lane; b < nblk; b += 32) {
    uint32_t w[16];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint4 v = xr[4 * b + i];
      w[4 * i] = v.x;
      w[4 * i + 1] = v.y;
      w[4 * i + 2] = v.z;
      w[4 * i + 3] = v.w;
    }
    uint32_t lo[4], hi[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      auto even = [&](int j) { return __uint_as_float(w[4 * i + j] << 16) * sc.inv; };
      auto odd = [&](int j) { return __uint_as_float(w[4 * i + j] & 0xffff0000u) * sc.inv; };
      lo[i] = fp8x4_from_float(even(0), even(1), even(2), even(3));
      hi[i] = fp8x4_from_float(odd(0), odd(1), odd(2), odd(3));
    }
    qr[2 * b] = make_uint4(lo[0], lo[1], lo[2], lo[3]);
    qr[2 * b + 1] = make_uint4(hi[0], hi[1], hi[2], hi[3]);
  }
  if (lane == 0) scale[row] = sc.scale;
}

template <int kNT, bool kSwiglu>
struct W4a8KernelTag {};

template <int kNT, bool kSwiglu>
void launch(const Mxfp4W4a8Args& p, cudaStream_t stream) {
  const int bytes = smem_bytes(8 * kNT, p.k);
  ORCHID_KERNEL_REQUIRE(bytes <= device_info().max_smem_per_block_optin,
                        "mxfp4_w4a8_gemm: k too large for the shared scale tile");
  auto kernel = mxfp4_w4a8_kernel<kNT, kSwiglu>;
  ensure_dynamic_smem<W4a8KernelTag<kNT, kSwiglu>>(kernel, device_info().max_smem_per_block_optin);
  const dim3 grid(unsigned(p.max_tiles), unsigned((p.n + kRowsPerCta - 1) / kRowsPerCta));
  launch_pdl(kernel, grid, dim3(kThreads), size_t(bytes), stream, p);
}

template <bool kSwiglu>
void dispatch(const Mxfp4W4a8Args& p, cudaStream_t stream) {
  switch (p.tile_tokens) {
    case 8:
      return launch<1, kSwiglu>(p, stream);
    case 16:
      return launch<2, kSwiglu>(p, stream);
    case 32:
      return launch<4, kSwiglu>(p, stream);
    default:
      ORCHID_KERNEL_REQUIRE(false, "mxfp4_w4a8_gemm: tile_tokens must be 8, 16 or 32");
  }
}

}  // namespace

void mxfp4_w4a8_quantize(const void* x, const int* row_map, int rows, int k, uint8_t* q, float* scale,
                         cudaStream_t stream) {
  ORCHID_KERNEL_REQUIRE(k > 0 && k % 32 == 0, "mxfp4_w4a8_quantize: k must be a positive multiple of 32");
  ORCHID_KERNEL_REQUIRE(x && q && scale, "mxfp4_w4a8_quantize: null pointer");
  ORCHID_KERNEL_REQUIRE((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(q)) % 16 == 0,
                        "mxfp4_w4a8_quantize: x and q must be 16-byte aligned");
  if (rows <= 0) return;
  launch_pdl(w4a8_quantize_kernel, dim3(unsigned((rows + 7) / 8)), dim3(256), 0, stream,
             static_cast<const uint4*>(x), row_map, rows, k, q, scale);
  ORCHID_CUDA_CHECK_LAUNCH();
}

void mxfp4_w4a8_gemm(const Mxfp4W4a8Args& p, cudaStream_t stream) {
  ORCHID_KERNEL_REQUIRE(p.n > 0 && p.n % 16 == 0, "mxfp4_w4a8_gemm: n must be a positive multiple of 16");
  ORCHID_KERNEL_REQUIRE(p.k > 0 && p.k % 32 == 0, "mxfp4_w4a8_gemm: k must be a positive multiple of 32");
  ORCHID_KERNEL_REQUIRE(p.offsets && p.tiles && p.blocks && p.scales && p.x && p.x_scale && p.y,
                        "mxfp4_w4a8_gemm: null pointer");
  ORCHID_KERNEL_REQUIRE((reinterpret_cast<uintptr_t>(p.x) | reinterpret_cast<uintptr_t>(p.blocks) |
                         reinterpret_cast<uintptr_t>(p.scales)) %
                                16 ==
                            0,
                        "mxfp4_w4a8_gemm: x, blocks and scales must be 16-byte aligned");
  if (p.max_tiles <= 0) return;
  if (p.swiglu_bias)
    dispatch<true>(p, stream);
  else
    dispatch<false>(p, stream);
}

}  // namespace orchid::kernels
