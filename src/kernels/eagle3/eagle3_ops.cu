#include "kernels/eagle3/eagle3_ops.h"

#include <cmath>

#include "kernels/common/cuda_check.h"

namespace orchid::kernels::eagle3 {

namespace {

constexpr int kHalf = kHeadDim / 2;

// The K or V row of a head row at its position, through its page table (null: no page there).
__device__ __forceinline__ __nv_bfloat16* kv_row(const HeadKv& kv, bool key, const HeadRow& r, int kv_head) {
  const int page = kv.page_table[r.table_begin + r.pos / kv.page_size];
  if (page < 0 || page >= kv.num_pages) return nullptr;
  const size_t at =
      ((size_t(page) * kv.num_kv_heads + kv_head) * kv.page_size + r.pos % kv.page_size) * kHeadDim;
  return (key ? kv.k_pool : kv.v_pool) + at;
}

__global__ void rope_kv_kernel(const __nv_bfloat16* qkv, const HeadRow* rows, RopeFreqs f, HeadKv kv,
                               __nv_bfloat16* q_out) {
  const int r = blockIdx.x;
  const HeadRow row = rows[r];
  const int Hq = kv.num_q_heads, Hkv = kv.num_kv_heads;
  const int width = (Hq + 2 * Hkv) * kHeadDim;
  const __nv_bfloat16* in = qkv + size_t(r) * width;
  // One thread per rotated pair (q and k heads) or per V element pair.
  const int pairs = (Hq + Hkv) * kHalf + Hkv * kHalf;
  for (int p = threadIdx.x; p < pairs; p += blockDim.x) {
    const int head = p / kHalf, j = p % kHalf;
    if (head >= Hq + Hkv) {  // V: two elements, copied
      const int vh = head - Hq - Hkv;
      __nv_bfloat16* dst = kv_row(kv, false, row, vh);
      if (dst == nullptr) continue;
      const __nv_bfloat16* src = in + (Hq + Hkv + vh) * kHeadDim;
      dst[j] = src[j];
      dst[j + kHalf] = src[j + kHalf];
      continue;
    }
    // angle = fp32(pos) * inv_freq (one fp32 product), then cos/sin of it, times the concentration.
    const float angle = __fmul_rn(float(row.pos), f.inv_freq[j]);
    const float c = cosf(angle) * f.concentration, s = sinf(angle) * f.concentration;
    const __nv_bfloat16* src = in + head * kHeadDim;
    const float a = __bfloat162float(src[j]), b = __bfloat162float(src[j + kHalf]);
    const __nv_bfloat16 lo = __float2bfloat16(a * c - b * s), hi = __float2bfloat16(b * c + a * s);
    if (head < Hq) {
      __nv_bfloat16* dst = q_out + (size_t(r) * Hq + head) * kHeadDim;
      dst[j] = lo;
      dst[j + kHalf] = hi;
    } else {
      __nv_bfloat16* dst = kv_row(kv, true, row, head - Hq);
      if (dst == nullptr) continue;
      dst[j] = lo;
      dst[j + kHalf] = hi;
    }
  }
}

__global__ void silu_mul_kernel(const __nv_bfloat16* gu, int64_t rows, int64_t inter, __nv_bfloat16* act) {
  const int64_t n = rows * inter;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / inter, c = i % inter;
    const float g = __bfloat162float(gu[r * 2 * inter + c]),
                u = __bfloat162float(gu[r * 2 * inter + inter + c]);
    act[i] = __float2bfloat16(g / (1.0f + __expf(-g)) * u);
  }
}

__global__ void f32_to_bf16_cols_kernel(const float* src, int64_t rows, int64_t cols, __nv_bfloat16* dst,
                                        int64_t ld_dst, int64_t col0) {
  const int64_t n = rows * cols;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    dst[(i / cols) * ld_dst + col0 + i % cols] = __float2bfloat16(src[i]);
}

__global__ void map_ids_kernel(const int32_t* ids, const int32_t* d2t, int64_t rows, int32_t* tokens,
                               int32_t* proposals, int64_t stride, int64_t column) {
  const int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  const int32_t t = d2t[ids[r]];
  tokens[r] = t;
  proposals[r * stride + column] = t;
}

int grid_for(int64_t n, int threads) {
  const int64_t blocks = (n + threads - 1) / threads;
  return int(blocks < 4096 ? (blocks > 0 ? blocks : 1) : 4096);
}

}  // namespace

void rope_kv_write(const __nv_bfloat16* qkv, const HeadRow* rows, int64_t num_rows, const RopeFreqs& freqs,
                   const HeadKv& kv, __nv_bfloat16* q_out, cudaStream_t stream) {
  if (num_rows == 0) return;
  rope_kv_kernel<<<unsigned(num_rows), 256, 0, stream>>>(qkv, rows, freqs, kv, q_out);
  ORCHID_CUDA_CHECK(cudaGetLastError());
}

void silu_mul(const __nv_bfloat16* gu, int64_t rows, int64_t inter, __nv_bfloat16* act, cudaStream_t stream) {
  if (rows * inter == 0) return;
  silu_mul_kernel<<<grid_for(rows * inter, 256), 256, 0, stream>>>(gu, rows, inter, act);
  ORCHID_CUDA_CHECK(cudaGetLastError());
}

void f32_to_bf16_cols(const float* src, int64_t rows, int64_t cols, __nv_bfloat16* dst, int64_t ld_dst,
                      int64_t col0, cudaStream_t stream) {
  if (rows * cols == 0) return;
  f32_to_bf16_cols_kernel<<<grid_for(rows * cols, 256), 256, 0, stream>>>(src, rows, cols, dst, ld_dst, col0);
  ORCHID_CUDA_CHECK(cudaGetLastError());
}

void map_draft_ids(const int32_t* ids, const int32_t* d2t, int64_t rows, int32_t* tokens, int32_t* proposals,
                   int64_t stride, int64_t column, cudaStream_t stream) {
  if (rows == 0) return;
  map_ids_kernel<<<grid_for(rows, 128), 128, 0, stream>>>(ids, d2t, rows, tokens, proposals, stride, column);
  ORCHID_CUDA_CHECK(cudaGetLastError());
}

}  // namespace orchid::kernels::eagle3
