#include <algorithm>
#include <cfloat>

#include "kernels/common/cuda_check.h"
#include "kernels/common/pdl.cuh"
#include "kernels/ops/ops.h"

namespace orchid::kernels::ops {

namespace {

__global__ void embedding_gather_kernel(const __nv_bfloat16* __restrict__ table,
                                        const int32_t* __restrict__ ids, float* __restrict__ x,
                                        int64_t hidden) {
  pdl_wait();  // programmatic dependent launch (kernels/common/pdl.cuh)
  const int64_t row = blockIdx.x;
  const __nv_bfloat16* src = table + int64_t(ids[row]) * hidden;
  float* dst = x + row * hidden;
  for (int64_t c = int64_t(threadIdx.x) * 8; c < hidden; c += int64_t(blockDim.x) * 8) {
    const uint4 raw = *reinterpret_cast<const uint4*>(src + c);
    const __nv_bfloat162* h2 = reinterpret_cast<const __nv_bfloat162*>(&raw);
    float4 a, b;
    float2 f0 = __bfloat1622float2(h2[0]), f1 = __bfloat1622float2(h2[1]);
    float2 f2 = __bfloat1622float2(h2[2]), f3 = __bfloat1622float2(h2[3]);
    a = make_float4(f0.x, f0.y, f1.x, f1.y);
    b = make_float4(f2.x, f2.y, f3.x, f3.y);
    *reinterpret_cast<float4*>(dst + c) = a;
    *reinterpret_cast<float4*>(dst + c + 4) = b;
  }
}

__global__ void gather_rows_kernel(const float* __restrict__ src, const int32_t* __restrict__ index,
                                   float* __restrict__ dst, int64_t cols) {
  pdl_wait();  // programmatic dependent launch (kernels/common/pdl.cuh)
  const int64_t r = blockIdx.x;
  const float* s = src + int64_t(index[r]) * cols;
  float* d = dst + r * cols;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) d[c] = s[c];
}

__global__ void bf16_to_f32_kernel(const __nv_bfloat16* __restrict__ src, float* __restrict__ dst,
                                   int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = __bfloat162float(src[i]);
}

__global__ void f32_to_bf16_kernel(const float* __restrict__ src, __nv_bfloat16* __restrict__ dst,
                                   int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = __float2bfloat16_rn(src[i]);
}

// One CTA per row: max (lowest index on ties) in one pass, then the sum of exp(x - max) in a second pass over
// the row (a 201088-entry row is 800 KB and stays in L2 between the passes).
constexpr int kPickThreads = 1024;
__global__ void __launch_bounds__(kPickThreads)
    greedy_pick_kernel(const float* __restrict__ logits, int64_t vocab, int32_t* ids, float* logprobs) {
  pdl_wait();  // programmatic dependent launch (kernels/common/pdl.cuh)
  const float* row = logits + int64_t(blockIdx.x) * vocab;
  float best = -FLT_MAX;
  int64_t best_i = vocab;
  for (int64_t i = threadIdx.x; i < vocab; i += kPickThreads) {
    const float v = row[i];
    if (v > best || best_i == vocab) {  // ascending i: ties keep the lower index
      best = v;
      best_i = i;
    }
  }
  __shared__ float s_val[32];
  __shared__ int64_t s_idx[32];
  __shared__ float s_sum[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int off = 16; off > 0; off >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, best, off);
    const int64_t oi = __shfl_xor_sync(0xffffffffu, best_i, off);
    if (ov > best || (ov == best && oi < best_i)) {
      best = ov;
      best_i = oi;
    }
  }
  if (lane == 0) {
    s_val[warp] = best;
    s_idx[warp] = best_i;
  }
  __syncthreads();
  if (warp == 0) {
    best = s_val[lane];
    best_i = s_idx[lane];
    for (int off = 16; off > 0; off >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, best, off);
      const int64_t oi = __shfl_xor_sync(0xffffffffu, best_i, off);
      if (ov > best || (ov == best && oi < best_i)) {
        best = ov;
        best_i = oi;
      }
    }
    if (lane == 0) {
      s_val[0] = best;
      s_idx[0] = best_i;
    }
  }
  __syncthreads();
  const float mx = s_val[0];
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < vocab; i += kPickThreads) sum += __expf(row[i] - mx);
  for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  if (lane == 0) s_sum[warp] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0.0f;
    for (int w = 0; w < kPickThreads / 32; ++w) total += s_sum[w];
    ids[blockIdx.x] = int32_t(s_idx[0] < vocab ? s_idx[0] : 0);
    logprobs[blockIdx.x] = -logf(total);
  }
}

unsigned grid_for(int64_t n) {
  const int64_t blocks = (n + 255) / 256;
  return unsigned(blocks < 65536 ? (blocks > 0 ? blocks : 1) : 65536);
}

__global__ void add_f32_kernel(float* __restrict__ x, const float* __restrict__ d, int64_t n) {
  pdl_wait();  // programmatic dependent launch (kernels/common/pdl.cuh)
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    x[i] += d[i];
}

__global__ void sum_f32_kernel(SumSources src, int count, int64_t n, float* __restrict__ out) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    float s = src.p[0][i];
    for (int r = 1; r < count; ++r) s += src.p[r][i];
    out[i] = s;
  }
}

int elementwise_grid(int64_t n) {
  return int(std::min<int64_t>((n + 255) / 256, 4096));
}

}  // namespace

void add_f32(float* x, const float* d, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  launch_pdl(add_f32_kernel, dim3(elementwise_grid(n)), dim3(256), 0, stream, x, d, n);
  ORCHID_CUDA_CHECK_LAUNCH();
}

void sum_f32(const SumSources& src, int count, int64_t n, float* out, cudaStream_t stream) {
  ORCHID_KERNEL_REQUIRE(count >= 1 && count <= kMaxSumBuffers, "sum_f32: 1 to 16 buffers");
  if (n <= 0) return;
  sum_f32_kernel<<<elementwise_grid(n), 256, 0, stream>>>(src, count, n, out);
  ORCHID_CUDA_CHECK_LAUNCH();
}

void embedding_gather(const __nv_bfloat16* table, const int32_t* ids, float* x, int64_t rows, int64_t hidden,
                      cudaStream_t stream) {
  if (rows == 0) return;
  ORCHID_KERNEL_REQUIRE(hidden % 8 == 0, "embedding_gather: hidden must be a multiple of 8");
  launch_pdl(embedding_gather_kernel, dim3(unsigned(rows)), dim3(128), 0, stream, table, ids, x, hidden);
  ORCHID_CUDA_CHECK_LAUNCH();
}

void gather_rows_f32(const float* src, const int32_t* index, float* dst, int64_t rows, int64_t cols,
                     cudaStream_t stream) {
  if (rows == 0) return;
  launch_pdl(gather_rows_kernel, dim3(unsigned(rows)), dim3(256), 0, stream, src, index, dst, cols);
  ORCHID_CUDA_CHECK_LAUNCH();
}

void bf16_to_f32(const __nv_bfloat16* src, float* dst, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  bf16_to_f32_kernel<<<grid_for(n), 256, 0, stream>>>(src, dst, n);
  ORCHID_CUDA_CHECK_LAUNCH();
}

void f32_to_bf16(const float* src, __nv_bfloat16* dst, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  f32_to_bf16_kernel<<<grid_for(n), 256, 0, stream>>>(src, dst, n);
  ORCHID_CUDA_CHECK_LAUNCH();
}

void greedy_pick(const float* logits, int64_t rows, int64_t vocab, int32_t* ids, float* logprobs,
                 cudaStream_t stream) {
  if (rows == 0) return;
  launch_pdl(greedy_pick_kernel, dim3(unsigned(rows)), dim3(kPickThreads), 0, stream, logits, vocab, ids,
             logprobs);
  ORCHID_CUDA_CHECK_LAUNCH();
}

namespace {

// Grid-stride over spans (blockIdx) and over each span's 16-byte words (threads).
__global__ void __launch_bounds__(256) copy_spans_kernel(const CopySpan* __restrict__ spans, int64_t n) {
  for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
    const CopySpan s = spans[i];
    const uint4* src = static_cast<const uint4*>(s.src);
    uint4* dst = static_cast<uint4*>(s.dst);
    for (uint64_t w = threadIdx.x; w < s.bytes / 16; w += blockDim.x) dst[w] = src[w];
  }
}

__global__ void scatter_tokens_kernel(const int32_t* __restrict__ src, int64_t src_stride,
                                      const int32_t* __restrict__ pairs, int64_t n,
                                      int32_t* __restrict__ tokens) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int32_t id = src[int64_t(pairs[2 * i + 1]) * src_stride];
  tokens[pairs[2 * i]] = id < 0 ? 0 : id;  // the sampler's "nothing drawable" (-1) must not index the table
}

}  // namespace

void scatter_tokens(const int32_t* src, int64_t src_stride, const int32_t* pairs, int64_t n, int32_t* tokens,
                    cudaStream_t stream) {
  if (n <= 0) return;
  scatter_tokens_kernel<<<unsigned((n + 255) / 256), 256, 0, stream>>>(src, src_stride, pairs, n, tokens);
  ORCHID_CUDA_CHECK_LAUNCH();
}

void copy_spans(const CopySpan* spans, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  const unsigned blocks = unsigned(std::min<int64_t>(n, 65535));
  copy_spans_kernel<<<blocks, 256, 0, stream>>>(spans, n);
  ORCHID_CUDA_CHECK_LAUNCH();
}

}  // namespace orchid::kernels::ops
