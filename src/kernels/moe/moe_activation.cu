// Napkin math (gpt-oss-20b, 8192-token prefill, M = 32768 permuted rows, H = I = 2880), per layer:
//   gather+quant: read 8192*2880*2 B (L2 catches the 4x reuse) + write 32768*2944 B -> ~0.15 GB, ~36 us;
//   swiglu: read 32768*5760*2 B + write 32768*2944 B -> 0.47 GB, ~0.11 ms (vs ~0.8 ms for the gate_up GEMM);
//   combine: read 32768*2880*2 B + x in/out 2*8192*2880*4 B -> 0.38 GB, ~90 us at 4.17 TB/s.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "kernels/common/cuda_check.h"
#include "kernels/common/pdl.cuh"
#include "kernels/common/quant.cuh"
#include "kernels/moe/moe_activation.h"
#include "kernels/moe/swiglu.cuh"
#include "kernels/norm/rmsnorm.h"
#include "kernels/norm/rmsnorm_row.cuh"

namespace orchid::kernels {
namespace {

__device__ __forceinline__ void unpack_bf16x2(uint32_t w, float& lo, float& hi) {
  lo = __uint_as_float(w << 16);
  hi = __uint_as_float(w & 0xffff0000u);
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

__global__ void gather_bf16_kernel(const uint4* __restrict__ h, const int* __restrict__ row_token, int rows,
                                   int vecs_per_row, uint4* __restrict__ out) {
  pdl_wait();  // programmatic dependent launch (kernels/common/pdl.cuh)
  const int64_t total = int64_t(rows) * vecs_per_row;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / vecs_per_row, v = i % vecs_per_row;
    const int64_t src = row_token ? row_token[r] : r;
    out[i] = h[src * vecs_per_row + v];
  }
}

// One warp per (row, 128-column group); lane l owns columns 4l..4l+3 of the group.
__global__ void gather_quant_fp8_kernel(const __nv_bfloat16* __restrict__ h,
                                        const int* __restrict__ row_token, int rows, int k, int groups,
                                        uint8_t* __restrict__ out_q, float* __restrict__ out_scale) {
  const int64_t warp = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (warp >= int64_t(rows) * groups) return;
  const int64_t r = warp / groups;
  const int g = int(warp % groups);
  const int64_t src = row_token ? row_token[r] : r;
  const int col = g * 128 + lane * 4;
  float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  if (col < k) {
    const uint2 w = *reinterpret_cast<const uint2*>(h + src * k + col);
    unpack_bf16x2(w.x, v[0], v[1]);
    unpack_bf16x2(w.y, v[2], v[3]);
  }
  float amax = fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3])));
  amax = warp_max(amax);
  const Fp8GroupScale s = fp8_group_scale(amax);
  const int64_t kpad = int64_t(groups) * 128;
  *reinterpret_cast<uint32_t*>(out_q + r * kpad + col) =
      fp8x4_from_float(v[0] * s.inv, v[1] * s.inv, v[2] * s.inv, v[3] * s.inv);
  if (lane == 0) out_scale[r * groups + g] = s.scale;
}

// z for the 4 (gate, up) pairs in 8 consecutive u columns starting at u_col.
__device__ __forceinline__ void swiglu4(const __nv_bfloat16* __restrict__ u_row,
                                        const __nv_bfloat16* __restrict__ b_row, int u_col, SwigluParams p,
                                        float z[4]) {
  const uint4 uu = *reinterpret_cast<const uint4*>(u_row + u_col);
  const uint4 bb = *reinterpret_cast<const uint4*>(b_row + u_col);
  const uint32_t uw[4] = {uu.x, uu.y, uu.z, uu.w};
  const uint32_t bw[4] = {bb.x, bb.y, bb.z, bb.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    float ug, uup, bg, bup;
    unpack_bf16x2(uw[i], ug, uup);
    unpack_bf16x2(bw[i], bg, bup);
    z[i] = swiglu_fp32(ug + bg, uup + bup, p.limit, p.alpha);
  }
}

__global__ void swiglu_bf16_kernel(const __nv_bfloat16* __restrict__ u, const __nv_bfloat16* __restrict__ b1,
                                   const int* __restrict__ row_expert, int rows, int inter, SwigluParams p,
                                   __nv_bfloat16* __restrict__ z) {
  const int quads = inter / 4;
  const int64_t total = int64_t(rows) * quads;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / quads;
    const int q = int(i % quads);
    float zz[4];
    swiglu4(u + r * 2 * inter, b1 + int64_t(row_expert[r]) * 2 * inter, q * 8, p, zz);
    *reinterpret_cast<uint2*>(z + r * inter + q * 4) =
        make_uint2(pack_bf16x2(zz[0], zz[1]), pack_bf16x2(zz[2], zz[3]));
  }
}

// One warp per (row, 128-column group of z); lane l owns z columns 4l..4l+3 (u columns 8l..8l+7).
__global__ void swiglu_fp8_kernel(const __nv_bfloat16* __restrict__ u, const __nv_bfloat16* __restrict__ b1,
                                  const int* __restrict__ row_expert, int rows, int inter, int groups,
                                  SwigluParams p, uint8_t* __restrict__ z_q, float* __restrict__ z_scale) {
  const int64_t warp = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (warp >= int64_t(rows) * groups) return;
  const int64_t r = warp / groups;
  const int g = int(warp % groups);
  const int col = g * 128 + lane * 4;
  float z[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  if (col < inter) swiglu4(u + r * 2 * inter, b1 + int64_t(row_expert[r]) * 2 * inter, col * 2, p, z);
  float amax = fmaxf(fmaxf(fabsf(z[0]), fabsf(z[1])), fmaxf(fabsf(z[2]), fabsf(z[3])));
  amax = warp_max(amax);
  const Fp8GroupScale s = fp8_group_scale(amax);
  const int64_t kpad = int64_t(groups) * 128;
  *reinterpret_cast<uint32_t*>(z_q + r * kpad + col) =
      fp8x4_from_float(z[0] * s.inv, z[1] * s.inv, z[2] * s.inv, z[3] * s.inv);
  if (lane == 0) z_scale[r * groups + g] = s.scale;
}

// The FP8 1x128 quantizers by rows (the default; ORCHID_MOE_QUANT_ROWS=0 for the warp-a-group kernels): a
// block a row (blockIdx.x, then every gridDim.x-th), 16 threads a 128-column group, 8 columns a thread
// (16-byte loads, 8-byte stores), the group's amax over its half-warp; the codes and scales of the kernels
// above. Those (a warp a group, 4 columns a lane, the row found by a 64-bit division) took 0.16 ms a layer
// for the gather and 0.26 ms for SwiGLU at an 8192-token prefill of 20b on an H100, 2.4-4.4x their bytes'
// time: by the instruction count, few bytes in flight a warp for its index work. Every thread of a block runs
// the same rounds (the half-warps' shuffles need their whole warp); columns past k in the row's last group
// are written as zeros, as the GEMM's padded K reads them.
__device__ __forceinline__ float half_warp_max(float v) {
#pragma unroll
  for (int off = 8; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

// Quantizes a thread's 8 values of a group (amax over the half-warp), stores their codes at q, and the
// group's scale at *scale from the half-warp's first thread.
__device__ __forceinline__ void quant8_store(const float (&v)[8], bool valid, int sub, uint8_t* q,
                                             float* scale) {
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < 8; ++i) amax = fmaxf(amax, fabsf(v[i]));
  amax = half_warp_max(amax);
  if (!valid) return;
  const Fp8GroupScale s = fp8_group_scale(amax);
  *reinterpret_cast<uint2*>(q) =
      make_uint2(fp8x4_from_float(v[0] * s.inv, v[1] * s.inv, v[2] * s.inv, v[3] * s.inv),
                 fp8x4_from_float(v[4] * s.inv, v[5] * s.inv, v[6] * s.inv, v[7] * s.inv));
  if (sub == 0) *scale = s.scale;
}

__global__ void gather_quant_fp8_rows_kernel(const __nv_bfloat16* __restrict__ h,
                                             const int* __restrict__ row_token, int rows, int k, int groups,
                                             uint8_t* __restrict__ out_q, float* __restrict__ out_scale) {
  const int sub = threadIdx.x & 15, rounds = (groups * 16 + int(blockDim.x) - 1) / int(blockDim.x);
  const int64_t kpad = int64_t(groups) * 128;
  for (int r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t src = row_token ? row_token[r] : r;
    const __nv_bfloat16* row = h + src * k;
    for (int round = 0; round < rounds; ++round) {
      const int g = (round * int(blockDim.x) + int(threadIdx.x)) >> 4, col = g * 128 + sub * 8;
      float v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      if (g < groups && col < k) {  // k % 8 == 0: rows start 16-byte aligned, a thread's 8 columns all in
        const uint4 w = *reinterpret_cast<const uint4*>(row + col);
        unpack_bf16x2(w.x, v[0], v[1]);
        unpack_bf16x2(w.y, v[2], v[3]);
        unpack_bf16x2(w.z, v[4], v[5]);
        unpack_bf16x2(w.w, v[6], v[7]);
      }
      quant8_store(v, g < groups, sub, out_q + r * kpad + col, out_scale + int64_t(r) * groups + g);
    }
  }
}

// As gather_quant_fp8_rows_kernel: a thread's 8 z columns are 16 u columns (gate, up interleaved).
__global__ void swiglu_fp8_rows_kernel(const __nv_bfloat16* __restrict__ u,
                                       const __nv_bfloat16* __restrict__ b1,
                                       const int* __restrict__ row_expert, int rows, int inter, int groups,
                                       SwigluParams p, uint8_t* __restrict__ z_q,
                                       float* __restrict__ z_scale) {
  const int sub = threadIdx.x & 15, rounds = (groups * 16 + int(blockDim.x) - 1) / int(blockDim.x);
  const int64_t kpad = int64_t(groups) * 128;
  for (int r = blockIdx.x; r < rows; r += gridDim.x) {
    const __nv_bfloat16* u_row = u + int64_t(r) * 2 * inter;
    const __nv_bfloat16* b_row = b1 + int64_t(row_expert[r]) * 2 * inter;
    for (int round = 0; round < rounds; ++round) {
      const int g = (round * int(blockDim.x) + int(threadIdx.x)) >> 4, col = g * 128 + sub * 8;
      float z[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      if (g < groups && col < inter) swiglu4(u_row, b_row, col * 2, p, z);
      if (g < groups && col + 4 < inter) swiglu4(u_row, b_row, col * 2 + 8, p, z + 4);
      quant8_store(z, g < groups, sub, z_q + r * kpad + col, z_scale + int64_t(r) * groups + g);
    }
  }
}

// x[t, 8v .. 8v+7] (+)= the weighted sum of the token's k expert rows there, in two parts around the
// dependency wait. combine_routing reads what the routing wrote (the k (row, expert, weight) triples) and the
// experts' down biases, all written two or more kernels back, so before the wait (kernels/common/pdl.cuh);
// combine_rows then has all k expert rows (the previous kernel's output) and the residual in flight together
// (a decode token's combine is one round trip after the wait, not two) and sums in the fixed order
// j = 0..k-1. Returns the 8 values written.
constexpr int kMaxK = 8;  // kMoeMaxTopK
struct CombineRouting {
  int64_t row[kMaxK];
  float w[kMaxK];
  uint4 bias[kMaxK];
};

__device__ __forceinline__ void combine_routing(const __nv_bfloat16* __restrict__ b2,
                                                const int* __restrict__ topk_idx,
                                                const float* __restrict__ topk_w,
                                                const int* __restrict__ slot_row, int top_k, int hidden,
                                                int expert_begin, int64_t t, int v, CombineRouting& r) {
  int64_t e[kMaxK];
#pragma unroll
  for (int j = 0; j < kMaxK; ++j) {
    if (j < top_k) {
      r.row[j] = slot_row[t * top_k + j];
      e[j] = topk_idx[t * top_k + j] - expert_begin;
      r.w[j] = topk_w[t * top_k + j];
    }
  }
#pragma unroll
  for (int j = 0; j < kMaxK; ++j)
    if (j < top_k && r.row[j] >= 0) r.bias[j] = *reinterpret_cast<const uint4*>(b2 + e[j] * hidden + v * 8);
}

__device__ __forceinline__ void combine_rows(const CombineRouting& r, const __nv_bfloat16* __restrict__ y,
                                             int top_k, int hidden, bool store, float* __restrict__ x,
                                             int64_t t, int v, float (&out)[8]) {
  uint4 yy[kMaxK];
#pragma unroll
  for (int j = 0; j < kMaxK; ++j)
    if (j < top_k && r.row[j] >= 0) yy[j] = *reinterpret_cast<const uint4*>(y + r.row[j] * hidden + v * 8);
  float4* xp = reinterpret_cast<float4*>(x + t * hidden + v * 8);
  const float4 zero = make_float4(0.f, 0.f, 0.f, 0.f);
  const float4 x0 = store ? zero : xp[0], x1 = store ? zero : xp[1];
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
#pragma unroll
  for (int j = 0; j < kMaxK; ++j) {
    if (j < top_k && r.row[j] >= 0) {
      const uint32_t yw[4] = {yy[j].x, yy[j].y, yy[j].z, yy[j].w};
      const uint32_t bw[4] = {r.bias[j].x, r.bias[j].y, r.bias[j].z, r.bias[j].w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        float y0, y1, c0, c1;
        unpack_bf16x2(yw[i], y0, y1);
        unpack_bf16x2(bw[i], c0, c1);
        acc[2 * i] += r.w[j] * (y0 + c0);
        acc[2 * i + 1] += r.w[j] * (y1 + c1);
      }
    }
  }
  out[0] = x0.x + acc[0], out[1] = x0.y + acc[1], out[2] = x0.z + acc[2], out[3] = x0.w + acc[3];
  out[4] = x1.x + acc[4], out[5] = x1.y + acc[5], out[6] = x1.z + acc[6], out[7] = x1.w + acc[7];
  xp[0] = make_float4(out[0], out[1], out[2], out[3]);
  xp[1] = make_float4(out[4], out[5], out[6], out[7]);
}

// One thread per 8 columns of a token.
constexpr int kCombineThreads = 64;
__global__ void __launch_bounds__(kCombineThreads)
    combine_kernel(const __nv_bfloat16* __restrict__ y, const __nv_bfloat16* __restrict__ b2,
                   const int* __restrict__ topk_idx, const float* __restrict__ topk_w,
                   const int* __restrict__ slot_row, int top_k, int hidden, int expert_begin, bool store,
                   float* __restrict__ x) {
  const int v = blockIdx.y * kCombineThreads + threadIdx.x;
  CombineRouting r;
  if (v < hidden / 8)
    combine_routing(b2, topk_idx, topk_w, slot_row, top_k, hidden, expert_begin, blockIdx.x, v, r);
  pdl_wait();  // programmatic dependent launch (kernels/common/pdl.cuh): y is the previous kernel's output
  if (v >= hidden / 8) return;
  float out[8];
  combine_rows(r, y, top_k, hidden, store, x, blockIdx.x, v, out);
}

// The combine of a token and the next layer's input RMSNorm of the residual it writes: one block per token,
// a thread per 8 columns (every load of the token in flight at once, as in combine_kernel), the norm by
// rmsnorm_row.cuh. One launch and one read of the residual fewer than the two kernels; the residual's bits
// are the combine's, the norm's sum of squares runs in another order than rmsnorm_residual's 96-thread one.
// hidden <= 3072 (gpt-oss: 2880, 360 threads; larger: the two kernels). The bound sets the registers a
// thread may use: at 1024 threads (64 registers) the combine's 2k loads in flight spilled.
constexpr int kCombineNormMaxThreads = 384;
__global__ void __launch_bounds__(kCombineNormMaxThreads)
    combine_norm_kernel(const __nv_bfloat16* __restrict__ y, const __nv_bfloat16* __restrict__ b2,
                        const int* __restrict__ topk_idx, const float* __restrict__ topk_w,
                        const int* __restrict__ slot_row, int top_k, int hidden, float* __restrict__ x,
                        const float* __restrict__ gamma, float eps, __nv_bfloat16* __restrict__ out) {
  const bool mine = int(threadIdx.x) < (hidden >> 3);
  CombineRouting r;
  if (mine) combine_routing(b2, topk_idx, topk_w, slot_row, top_k, hidden, 0, blockIdx.x, threadIdx.x, r);
  pdl_wait();  // programmatic dependent launch (kernels/common/pdl.cuh): y is the previous kernel's output
  float v[1][8];
  if (mine) combine_rows(r, y, top_k, hidden, false, x, blockIdx.x, threadIdx.x, v[0]);
  norm::detail::rmsnorm_row<1>(v, hidden, gamma, eps, out + size_t(blockIdx.x) * size_t(hidden), nullptr);
}

int grid_for(int64_t items, int threads) {
  return int(std::min<int64_t>((items + threads - 1) / threads, 65536));
}

// Threads of a quantizing block by rows: 16 a group, whole warps, at most 512 (more groups take more rounds).
unsigned quant_block(int groups) {
  return unsigned(std::min(512, (groups * 16 + 31) / 32 * 32));
}

// -1: as ORCHID_MOE_QUANT_ROWS says (0: a warp a group; unset or else: the kernels by rows, measured
// 2026-12-07 on an H100 at -1% / -1.7% of a 20b fp8 prefill of 8192 / 32768 tokens), else as
// moe_set_quant_by_rows set it.
int g_quant_by_rows = -1;
bool quant_by_rows() {
  if (g_quant_by_rows < 0) {
    const char* v = std::getenv("ORCHID_MOE_QUANT_ROWS");
    g_quant_by_rows = v != nullptr && std::strcmp(v, "0") == 0 ? 0 : 1;
  }
  return g_quant_by_rows == 1;
}

}  // namespace

void moe_gather_bf16(const void* h, const int* row_token, int rows, int k, void* out, cudaStream_t stream) {
  ORCHID_KERNEL_REQUIRE(k % 8 == 0, "moe_gather_bf16: k must be a multiple of 8");
  if (rows <= 0) return;
  const int vecs = k / 8;
  launch_pdl(gather_bf16_kernel, dim3(grid_for(int64_t(rows) * vecs, 256)), dim3(256), 0, stream,
             static_cast<const uint4*>(h), row_token, rows, vecs, static_cast<uint4*>(out));
  ORCHID_CUDA_CHECK_LAUNCH();
}

void moe_set_quant_by_rows(bool on) {
  g_quant_by_rows = on ? 1 : 0;
}

void moe_gather_quant_fp8(const void* h, const int* row_token, int rows, int k, uint8_t* out_q,
                          float* out_scale, cudaStream_t stream) {
  ORCHID_KERNEL_REQUIRE(k % 4 == 0, "moe_gather_quant_fp8: k must be a multiple of 4");
  if (rows <= 0) return;
  const int groups = round_up_128(k) / 128;
  if (quant_by_rows() && k % 8 == 0) {  // 16-byte loads need 16-byte aligned rows
    gather_quant_fp8_rows_kernel<<<unsigned(rows), quant_block(groups), 0, stream>>>(
        static_cast<const __nv_bfloat16*>(h), row_token, rows, k, groups, out_q, out_scale);
    ORCHID_CUDA_CHECK_LAUNCH();
    return;
  }
  const int64_t threads = int64_t(rows) * groups * 32;
  gather_quant_fp8_kernel<<<int((threads + 255) / 256), 256, 0, stream>>>(
      static_cast<const __nv_bfloat16*>(h), row_token, rows, k, groups, out_q, out_scale);
  ORCHID_CUDA_CHECK_LAUNCH();
}

void moe_swiglu_bf16(const void* u, const void* b1, const int* row_expert, int rows, int inter,
                     SwigluParams p, void* z, cudaStream_t stream) {
  ORCHID_KERNEL_REQUIRE(inter % 4 == 0, "moe_swiglu_bf16: inter must be a multiple of 4");
  if (rows <= 0) return;
  swiglu_bf16_kernel<<<grid_for(int64_t(rows) * (inter / 4), 256), 256, 0, stream>>>(
      static_cast<const __nv_bfloat16*>(u), static_cast<const __nv_bfloat16*>(b1), row_expert, rows, inter, p,
      static_cast<__nv_bfloat16*>(z));
  ORCHID_CUDA_CHECK_LAUNCH();
}

void moe_swiglu_fp8(const void* u, const void* b1, const int* row_expert, int rows, int inter, SwigluParams p,
                    uint8_t* z_q, float* z_scale, cudaStream_t stream) {
  ORCHID_KERNEL_REQUIRE(inter % 4 == 0, "moe_swiglu_fp8: inter must be a multiple of 4");
  if (rows <= 0) return;
  const int groups = round_up_128(inter) / 128;
  if (quant_by_rows()) {
    swiglu_fp8_rows_kernel<<<unsigned(rows), quant_block(groups), 0, stream>>>(
        static_cast<const __nv_bfloat16*>(u), static_cast<const __nv_bfloat16*>(b1), row_expert, rows, inter,
        groups, p, z_q, z_scale);
    ORCHID_CUDA_CHECK_LAUNCH();
    return;
  }
  const int64_t threads = int64_t(rows) * groups * 32;
  swiglu_fp8_kernel<<<int((threads + 255) / 256), 256, 0, stream>>>(
      static_cast<const __nv_bfloat16*>(u), static_cast<const __nv_bfloat16*>(b1), row_expert, rows, inter,
      groups, p, z_q, z_scale);
  ORCHID_CUDA_CHECK_LAUNCH();
}

void moe_combine(const void* y, const void* b2, const int* topk_idx, const float* topk_w, const int* slot_row,
                 int num_tokens, int top_k, int hidden, float* x, cudaStream_t stream, int expert_begin,
                 bool store) {
  ORCHID_KERNEL_REQUIRE(hidden % 8 == 0, "moe_combine: hidden must be a multiple of 8");
  if (num_tokens <= 0) return;
  ORCHID_KERNEL_REQUIRE(top_k >= 1 && top_k <= 8, "moe_combine: top_k must be in [1, 8]");
  const dim3 grid(unsigned(num_tokens), unsigned((hidden / 8 + kCombineThreads - 1) / kCombineThreads));
  launch_pdl(combine_kernel, dim3(grid), dim3(kCombineThreads), 0, stream,
             static_cast<const __nv_bfloat16*>(y), static_cast<const __nv_bfloat16*>(b2), topk_idx, topk_w,
             slot_row, top_k, hidden, expert_begin, store, x);
  ORCHID_CUDA_CHECK_LAUNCH();
}

void moe_combine_norm(const void* y, const void* b2, const int* topk_idx, const float* topk_w,
                      const int* slot_row, int num_tokens, int top_k, int hidden, float* x,
                      const float* gamma, float eps, void* out, cudaStream_t stream) {
  ORCHID_KERNEL_REQUIRE(hidden % 8 == 0, "moe_combine_norm: hidden must be a multiple of 8");
  if (num_tokens <= 0) return;
  ORCHID_KERNEL_REQUIRE(top_k >= 1 && top_k <= 8, "moe_combine_norm: top_k must be in [1, 8]");
  if (hidden / 8 > kCombineNormMaxThreads) {
    moe_combine(y, b2, topk_idx, topk_w, slot_row, num_tokens, top_k, hidden, x, stream, 0, false);
    norm::rmsnorm_residual(x, nullptr, gamma, static_cast<__nv_bfloat16*>(out), num_tokens, hidden, eps,
                           stream);
    return;
  }
  const int threads = (hidden / 8 + 31) / 32 * 32;
  launch_pdl(combine_norm_kernel, dim3(unsigned(num_tokens)), dim3(threads), 0, stream,
             static_cast<const __nv_bfloat16*>(y), static_cast<const __nv_bfloat16*>(b2), topk_idx, topk_w,
             slot_row, top_k, hidden, x, gamma, eps, static_cast<__nv_bfloat16*>(out));
  ORCHID_CUDA_CHECK_LAUNCH();
}

}  // namespace orchid::kernels
