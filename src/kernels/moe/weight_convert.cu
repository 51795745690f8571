// Napkin math: MXFP4 -> FP8 for one gpt-oss-20b layer reads 423 MB and writes 814 MB (+scales): ~0.3 ms at
// 4.17 TB/s, ~7 ms over 24 layers -- small next to the ~40 ms of FP8 expert GEMMs of an 8192-token prefill,
// which is why MXFP4 prefill goes through a per-layer FP8 workspace (see docs/design.md).
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "kernels/common/cuda_check.h"
#include "kernels/common/device_info.h"
#include "kernels/common/quant.cuh"
#include "kernels/common/smem_attribute.h"
#include "kernels/moe/mxfp4_word_order.h"
#include "kernels/moe/weight_convert.h"

namespace orchid::kernels {
namespace {

constexpr int kTile = 128;

struct ScalePair {
  float scale, inv;
};

// The block-scale rules of Fp8ScaleRule (mirrored on the host by the tests).
__device__ __forceinline__ ScalePair block_scale(float amax, Fp8ScaleRule rule) {
  if (!(amax > 0.0f)) return {1.0f, 1.0f};
  if (rule == Fp8ScaleRule::kAmaxOver448) return {__fdiv_rn(amax, kFp8Max), __fdiv_rn(kFp8Max, amax)};
  int ex;
  const float mant = frexpf(amax, &ex);      // amax = mant * 2^ex, mant in [0.5, 1)
  int e = mant <= 0.875f ? ex - 9 : ex - 8;  // 448 = 0.875 * 2^9
  e = max(-126, min(127, e));
  return {ldexpf(1.0f, e), ldexpf(1.0f, -e)};
}

// Block-wide max over 256 threads (8 warps).
__device__ __forceinline__ float block_max_256(float v, float* red) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
  __syncthreads();
  float m = red[0];
#pragma unroll
  for (int i = 1; i < 8; ++i) m = fmaxf(m, red[i]);
  return m;
}

// One thread per MX block: 16 bytes + 1 scale -> 32 bf16.
__global__ void mxfp4_to_bf16_kernel(const uint4* __restrict__ blocks, const uint8_t* __restrict__ scales,
                                     int64_t num_blocks, uint4* __restrict__ out) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < num_blocks;
       i += int64_t(gridDim.x) * blockDim.x) {
    const uint4 b = blocks[i];
    const float s = e8m0_to_float(scales[i]);
    const uint32_t w[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
    for (int q = 0; q < 4; ++q) {  // 4 source bytes -> 8 elements -> one uint4 of bf16
      uint32_t o[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const uint32_t byte = (w[q] >> (8 * j)) & 0xffu;
        const float lo = e2m1_to_float(byte & 0xfu) * s;
        const float hi = e2m1_to_float(byte >> 4) * s;
        o[j] = uint32_t(float_to_bf16_bits(lo)) | (uint32_t(float_to_bf16_bits(hi)) << 16);
      }
      out[i * 4 + q] = make_uint4(o[0], o[1], o[2], o[3]);
    }
  }
}

// A 128 x 128 output block's inputs as thread t of its 256 holds them: the MX blocks (row t/4 + 64i, column
// block t%4), raw.
struct BlockIn {
  uint4 src[2];
  uint8_t scale[2];  // e8m0
  bool valid[2], in_rows[2];
};

__device__ __forceinline__ void load_block(const uint8_t* __restrict__ blocks,
                                           const uint8_t* __restrict__ scales, int n, int kmx, int e, int rb,
                                           int cb, bool tiled_order, int64_t rows, BlockIn& in) {
  const int tid = threadIdx.x;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int row = rb * kTile + tid / 4 + 64 * i;
    const int mx = cb * 4 + tid % 4;
    in.in_rows[i] = row < n;
    in.valid[i] = in.in_rows[i] && mx < kmx;
    in.src[i] = make_uint4(0, 0, 0, 0);
    in.scale[i] = 0;
    if (in.valid[i]) {
      const int64_t idx = (int64_t(e) * n + row) * kmx + mx;
      // the repack at load: chunks of 16 rows, chunk-major over the tensor's rows (mxfp4_word_order.h)
      in.src[i] = reinterpret_cast<const uint4*>(
          blocks)[tiled_order ? mxfp4_order::repacked_block(int64_t(e) * n + row, mx, rows) : idx];
      in.scale[i] = scales[idx];
    }
  }
}

// The block's FP8 scale (a block-wide max: every thread of the CTA calls it), its e4m3 bytes and scale
// stored. red: 8 floats of shared memory.
__device__ __forceinline__ void convert_block(BlockIn in, int n, int k, int e, int rb, int cb,
                                              Fp8ScaleRule rule, uint8_t* __restrict__ out_q,
                                              float* __restrict__ out_scale, bool tiled_order, float* red) {
  const int kpad = (k + kTile - 1) / kTile * kTile, row_blocks = (n + kTile - 1) / kTile;
  const int tid = threadIdx.x;
  uint4* src = in.src;
  const bool* valid = in.valid;
  const bool* in_rows = in.in_rows;
  float sc[2];
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    sc[i] = 0.0f;
    if (valid[i]) {
      if (tiled_order) {  // back to nibbles in order (memory, not instructions, bounds this kernel)
        src[i].x = mxfp4_order::to_original_order(src[i].x);
        src[i].y = mxfp4_order::to_original_order(src[i].y);
        src[i].z = mxfp4_order::to_original_order(src[i].z);
        src[i].w = mxfp4_order::to_original_order(src[i].w);
      }
      sc[i] = e8m0_to_float(in.scale[i]);
      const uint32_t w[4] = {src[i].x, src[i].y, src[i].z, src[i].w};
      uint32_t maxcode = 0;
#pragma unroll
      for (int q = 0; q < 4; ++q)
#pragma unroll
        for (int j = 0; j < 8; ++j) maxcode = max(maxcode, (w[q] >> (4 * j)) & 7u);
      amax = fmaxf(amax, e2m1_to_float(maxcode) * sc[i]);
    }
  }
  amax = block_max_256(amax, red);
  const ScalePair s = block_scale(amax, rule);
  if (tid == 0) out_scale[(int64_t(e) * row_blocks + rb) * (kpad / kTile) + cb] = s.scale;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    if (!in_rows[i]) continue;
    const int row = rb * kTile + tid / 4 + 64 * i;
    const int col = cb * kTile + (tid % 4) * 32;
    // An MX block has one scale, so its 32 elements take at most 8 e4m3 magnitudes: the bytes of
    // e2m1(c) * sc * inv for codes c = 0..7 (the same float operations, so the same rounding, as converting
    // each element), looked up 4 at a time with a byte permute; e4m3's sign is bit 7, e2m1's bit 3 of the
    // nibble. About 3 instructions an element instead of ~13: the kernel was instruction-bound.
    uint32_t lut[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float v[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) v[j] = (e2m1_to_float(uint32_t(4 * h + j)) * sc[i]) * s.inv;
      lut[h] = fp8x4_from_float(v[0], v[1], v[2], v[3]);
    }
    // nib: a code in the low nibble of each byte -> those 4 elements' e4m3 bytes.
    auto lookup = [&](uint32_t nib) {
      const uint32_t sel = __byte_perm(nib | (nib >> 4), 0u, 0x0020u) & 0x7777u;
      return __byte_perm(lut[0], lut[1], sel) | ((nib & 0x08080808u) << 4);
    };
    const uint32_t w[4] = {src[i].x, src[i].y, src[i].z, src[i].w};
    uint32_t o[8];
#pragma unroll
    for (int q = 0; q < 4; ++q) {  // word q = elements 8q .. 8q + 7, element 2j in byte j's low nibble
      const uint32_t even = lookup(w[q] & 0x0f0f0f0fu);        // elements 0, 2, 4, 6
      const uint32_t odd = lookup((w[q] >> 4) & 0x0f0f0f0fu);  // elements 1, 3, 5, 7
      o[2 * q] = valid[i] ? __byte_perm(even, odd, 0x5140u) : 0u;
      o[2 * q + 1] = valid[i] ? __byte_perm(even, odd, 0x7362u) : 0u;
    }
    uint4* dst = reinterpret_cast<uint4*>(out_q + (int64_t(e) * n + row) * kpad + col);
    dst[0] = make_uint4(o[0], o[1], o[2], o[3]);
    dst[1] = make_uint4(o[4], o[5], o[6], o[7]);
  }
}

// One CTA (256 threads) per 128x128 output block.
__global__ void __launch_bounds__(256)
    mxfp4_to_fp8_kernel(const uint8_t* __restrict__ blocks, const uint8_t* __restrict__ scales, int n, int k,
                        Fp8ScaleRule rule, uint8_t* __restrict__ out_q, float* __restrict__ out_scale,
                        const int* __restrict__ expert_offsets, bool tiled_order) {
  __shared__ float red[8];
  const int cb = blockIdx.x, rb = blockIdx.y, e = blockIdx.z;
  if (expert_offsets && expert_offsets[e + 1] == expert_offsets[e]) return;
  BlockIn in;
  load_block(blocks, scales, n, k / 32, e, rb, cb, tiled_order, int64_t(gridDim.z) * n, in);
  convert_block(in, n, k, e, rb, cb, rule, out_q, out_scale, tiled_order, red);
}

// The same output from a persistent grid: each CTA walks the blocks (column block fastest, so neighbouring
// CTAs share the scales' sectors in L2) and loads its next block's words before it converts the current
// one, so a block's 8 KB are in flight while the one before is reduced, converted and stored (one CTA per
// block keeps only what the CTAs resident on an SM happen to have in flight). ORCHID_MXFP4_CONVERT=pipelined
// until measured.
__global__ void __launch_bounds__(256)
    mxfp4_to_fp8_pipelined_kernel(const uint8_t* __restrict__ blocks, const uint8_t* __restrict__ scales,
                                  int n, int k, Fp8ScaleRule rule, uint8_t* __restrict__ out_q,
                                  float* __restrict__ out_scale, const int* __restrict__ expert_offsets,
                                  bool tiled_order, int experts) {
  __shared__ float red[8];
  const int col_blocks = (k + kTile - 1) / kTile, row_blocks = (n + kTile - 1) / kTile, kmx = k / 32;
  const int64_t total = int64_t(experts) * row_blocks * col_blocks;
  struct Coord {
    int e = 0, rb = 0, cb = 0;
    bool skip = true;
  };
  auto coord = [&](int64_t b) {
    Coord c;
    c.cb = int(b % col_blocks);
    c.rb = int((b / col_blocks) % row_blocks);
    c.e = int(b / (int64_t(col_blocks) * row_blocks));
    c.skip = expert_offsets != nullptr && expert_offsets[c.e + 1] == expert_offsets[c.e];
    return c;
  };
  // One load site, inside the loop: iteration i issues block i's loads, then converts block i - 1 from the
  // registers the copy at the end of iteration i - 1 filled (that copy is where a load is waited for). A
  // block loaded before the loop would share the load scoreboard with the loop's, and the conversion would
  // wait for the next block's loads too (seen in the SASS of the first version).
  Coord cur;  // skip: nothing loaded yet
  BlockIn in;
  for (int64_t b = blockIdx.x;; b += gridDim.x) {
    Coord next;
    BlockIn in_next;
    if (b < total) {
      next = coord(b);
      if (!next.skip)
        load_block(blocks, scales, n, kmx, next.e, next.rb, next.cb, tiled_order, int64_t(experts) * n,
                   in_next);
    }
    if (!cur.skip) {  // CTA-uniform
      convert_block(in, n, k, cur.e, cur.rb, cur.cb, rule, out_q, out_scale, tiled_order, red);
      __syncthreads();  // red is reused by the next block's max
    }
    if (b >= total) break;
    cur = next;
    in = in_next;
  }
}

// One CTA per group of 16 rows: the group's blocks into shared memory, then out transposed and padded, each
// chunk to its place in the chunk-major layout (mxfp4_word_order.h's repacked_block), each word reordered.
__global__ void __launch_bounds__(256)
    to_tiled_order_kernel(const uint4* __restrict__ src, uint4* __restrict__ dst, int kmx) {
  extern __shared__ uint4 group[];  // [16 rows][kmx]
  const int kmxp = mxfp4_order::grouped_kmx(kmx);
  const int64_t groups = gridDim.x;
  const uint4* g = src + int64_t(blockIdx.x) * 16 * kmx;
  for (int i = threadIdx.x; i < 16 * kmx; i += blockDim.x) group[i] = g[i];
  __syncthreads();
  auto reorder = [](uint32_t w) { return mxfp4_order::to_tiled_order(w); };
  for (int i = threadIdx.x; i < 16 * kmxp; i += blockDim.x) {  // i = (chunk * 16 + row) * 4 + mx % 4
    const int chunk = i / 64, mx = chunk * 4 + i % 4, row = i / 4 % 16;
    const uint4 v = mx < kmx ? group[row * kmx + mx] : make_uint4(0, 0, 0, 0);
    dst[(chunk * groups + blockIdx.x) * 64 + i % 64] =
        make_uint4(reorder(v.x), reorder(v.y), reorder(v.z), reorder(v.w));
  }
}

// One CTA (256 threads) per 128x128 block; thread t owns columns 8*(t%16)..+7 of rows t/16 + 16i.
__global__ void __launch_bounds__(256)
    bf16_to_fp8_kernel(const __nv_bfloat16* __restrict__ w, int n, int k, Fp8ScaleRule rule,
                       uint8_t* __restrict__ out_q, float* __restrict__ out_scale) {
  __shared__ float red[8];
  const int cb = blockIdx.x, rb = blockIdx.y, e = blockIdx.z;
  const int kpad = (k + kTile - 1) / kTile * kTile, row_blocks = (n + kTile - 1) / kTile;
  const int tid = threadIdx.x;
  const int col = cb * kTile + (tid % 16) * 8;
  uint4 v[8];
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int row = rb * kTile + tid / 16 + 16 * i;
    v[i] = make_uint4(0, 0, 0, 0);
    if (row < n && col < k) v[i] = *reinterpret_cast<const uint4*>(w + (int64_t(e) * n + row) * k + col);
    const uint32_t x[4] = {v[i].x, v[i].y, v[i].z, v[i].w};
#pragma unroll
    for (int j = 0; j < 4; ++j)
      amax =
          fmaxf(amax, fmaxf(fabsf(__uint_as_float(x[j] << 16)), fabsf(__uint_as_float(x[j] & 0xffff0000u))));
  }
  amax = block_max_256(amax, red);
  const ScalePair s = block_scale(amax, rule);
  if (tid == 0) out_scale[(int64_t(e) * row_blocks + rb) * (kpad / kTile) + cb] = s.scale;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int row = rb * kTile + tid / 16 + 16 * i;
    if (row >= n) continue;
    const uint32_t x[4] = {v[i].x, v[i].y, v[i].z, v[i].w};
    const uint32_t lo =
        fp8x4_from_float(__uint_as_float(x[0] << 16) * s.inv, __uint_as_float(x[0] & 0xffff0000u) * s.inv,
                         __uint_as_float(x[1] << 16) * s.inv, __uint_as_float(x[1] & 0xffff0000u) * s.inv);
    const uint32_t hi =
        fp8x4_from_float(__uint_as_float(x[2] << 16) * s.inv, __uint_as_float(x[2] & 0xffff0000u) * s.inv,
                         __uint_as_float(x[3] << 16) * s.inv, __uint_as_float(x[3] & 0xffff0000u) * s.inv);
    *reinterpret_cast<uint2*>(out_q + (int64_t(e) * n + row) * kpad + col) = make_uint2(lo, hi);
  }
}

// The largest byte of scales[0, n) into *out (zeroed before): a grid-stride max, one atomic a warp.
__global__ void scale_max_kernel(const uint8_t* scales, int64_t n, uint32_t* out) {
  uint32_t m = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    m = max(m, uint32_t(scales[i]));
  m = __reduce_max_sync(0xffffffffu, m);
  if (threadIdx.x % 32 == 0 && m != 0) atomicMax(out, m);
}

}  // namespace

void mxfp4_scale_max(const uint8_t* scales, int64_t n, uint32_t* out, cudaStream_t stream) {
  ORCHID_KERNEL_REQUIRE(n >= 0 && out != nullptr && (n == 0 || scales != nullptr),
                        "mxfp4_scale_max: null pointer");
  ORCHID_CUDA_CHECK(cudaMemsetAsync(out, 0, sizeof(uint32_t), stream));
  if (n == 0) return;
  const int grid = int(std::min<int64_t>((n + 255) / 256, 4 * int64_t(device_info().sm_count)));
  scale_max_kernel<<<grid, 256, 0, stream>>>(scales, n, out);
  ORCHID_CUDA_CHECK_LAUNCH();
}

void mxfp4_to_bf16(const uint8_t* blocks, const uint8_t* scales, int experts, int n, int k, void* out,
                   cudaStream_t stream) {
  ORCHID_KERNEL_REQUIRE(k % 32 == 0, "mxfp4_to_bf16: k must be a multiple of 32");
  const int64_t num_blocks = int64_t(experts) * n * (k / 32);
  if (num_blocks <= 0) return;
  const int grid = int(std::min<int64_t>((num_blocks + 255) / 256, 8 * 65536));
  mxfp4_to_bf16_kernel<<<grid, 256, 0, stream>>>(reinterpret_cast<const uint4*>(blocks), scales, num_blocks,
                                                 static_cast<uint4*>(out));
  ORCHID_CUDA_CHECK_LAUNCH();
}

int mxfp4_to_fp8_ctas_per_sm() {
  static const int per_sm = [] {
    int b = 0;
    ORCHID_CUDA_CHECK(
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, mxfp4_to_fp8_pipelined_kernel, 256, 0));
    return std::max(b, 1);
  }();
  return per_sm;
}

void mxfp4_to_fp8_block(const uint8_t* blocks, const uint8_t* scales, int experts, int n, int k,
                        Fp8ScaleRule rule, uint8_t* out_q, float* out_scale, const int* expert_offsets,
                        cudaStream_t stream, bool tiled_order, Fp8ConvertGrid how, int sms) {
  ORCHID_KERNEL_REQUIRE(k % 32 == 0, "mxfp4_to_fp8_block: k must be a multiple of 32");
  ORCHID_KERNEL_REQUIRE(experts <= 65535, "mxfp4_to_fp8_block: too many experts");
  if (experts <= 0 || n <= 0) return;
  const dim3 grid((k + kTile - 1) / kTile, (n + kTile - 1) / kTile, experts);
  static const bool pipelined_by_env = [] {
    const char* v = std::getenv("ORCHID_MXFP4_CONVERT");
    return v != nullptr && std::strcmp(v, "pipelined") == 0;
  }();
  if (how == Fp8ConvertGrid::kPersistent || (how == Fp8ConvertGrid::kDefault && pipelined_by_env)) {
    const int64_t total = int64_t(grid.x) * grid.y * grid.z;
    const int on_sms = sms > 0 ? std::min(sms, device_info().sm_count) : device_info().sm_count;
    const int ctas = int(std::min<int64_t>(total, int64_t(on_sms) * mxfp4_to_fp8_ctas_per_sm()));
    mxfp4_to_fp8_pipelined_kernel<<<ctas, 256, 0, stream>>>(blocks, scales, n, k, rule, out_q, out_scale,
                                                            expert_offsets, tiled_order, experts);
  } else {
    mxfp4_to_fp8_kernel<<<grid, 256, 0, stream>>>(blocks, scales, n, k, rule, out_q, out_scale,
                                                  expert_offsets, tiled_order);
  }
  ORCHID_CUDA_CHECK_LAUNCH();
}

void mxfp4_to_tiled_order(const uint8_t* blocks, uint8_t* out, int64_t rows, int k, cudaStream_t stream) {
  ORCHID_KERNEL_REQUIRE(rows >= 0 && rows % 16 == 0 && k > 0 && k % 32 == 0,
                        "mxfp4_to_tiled_order: rows must be a multiple of 16 and k of 32");
  ORCHID_KERNEL_REQUIRE(((reinterpret_cast<uintptr_t>(blocks) | reinterpret_cast<uintptr_t>(out)) & 15) == 0,
                        "mxfp4_to_tiled_order: blocks must be 16-byte aligned");
  const int bytes = 16 * k / 32 * 16;  // one group's blocks
  ORCHID_KERNEL_REQUIRE(bytes <= device_info().max_smem_per_block_optin, "mxfp4_to_tiled_order: k too large");
  if (rows == 0) return;
  const uint8_t* in_end = blocks + rows * (k / 32) * 16;
  ORCHID_KERNEL_REQUIRE(in_end <= out || out + mxfp4_order::grouped_bytes(rows, k) <= blocks,
                        "mxfp4_to_tiled_order: the output must not overlap the input");
  ORCHID_KERNEL_REQUIRE(rows / 16 <= int64_t(INT32_MAX), "mxfp4_to_tiled_order: too many rows");
  ensure_dynamic_smem<struct ToTiledOrderTag>(to_tiled_order_kernel, device_info().max_smem_per_block_optin);
  to_tiled_order_kernel<<<unsigned(rows / 16), 256, bytes, stream>>>(reinterpret_cast<const uint4*>(blocks),
                                                                     reinterpret_cast<uint4*>(out), k / 32);
  ORCHID_CUDA_CHECK_LAUNCH();
}

void bf16_to_fp8_block(const void* w, int experts, int n, int k, Fp8ScaleRule rule, uint8_t* out_q,
                       float* out_scale, cudaStream_t stream) {
  ORCHID_KERNEL_REQUIRE(k % 8 == 0, "bf16_to_fp8_block: k must be a multiple of 8");
  ORCHID_KERNEL_REQUIRE(experts <= 65535, "bf16_to_fp8_block: too many experts");
  if (experts <= 0 || n <= 0) return;
  const dim3 grid((k + kTile - 1) / kTile, (n + kTile - 1) / kTile, experts);
  bf16_to_fp8_kernel<<<grid, 256, 0, stream>>>(static_cast<const __nv_bfloat16*>(w), n, k, rule, out_q,
                                               out_scale);
  ORCHID_CUDA_CHECK_LAUNCH();
}

}  // namespace orchid::kernels
