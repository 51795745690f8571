#include <cooperative_groups.h>

#include <algorithm>
#include <cfloat>

#include "kernels/common/cuda_check.h"
#include "kernels/common/device_info.h"
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

// Per row a cluster of 1-8 blocks, each one pass over its slice of the row keeping (max, sum of exp(x - max),
// arg-max) online; the blocks' states meet in block 0 through distributed shared memory. At one row the
// 201088 logits (800 KB) are read by 8 SMs instead of one, and once instead of twice (the first version took
// 24 us a decode step at batch 1 on an H100, 147 at batch 256).
constexpr int kPickThreads = 1024;
constexpr int kPickMaxCluster = 8;

struct PickState {
  float max, sum;
  int64_t arg;  // == vocab: empty
};

// The merge of two states; on equal maxima the lower id wins.
__device__ __forceinline__ PickState merge_pick(PickState a, PickState b, int64_t vocab) {
  if (b.arg == vocab) return a;
  if (a.arg == vocab) return b;
  const float m = fmaxf(a.max, b.max);
  PickState r;
  r.max = m;
  // A side at the maximum weighs exactly 1 (also when both are infinite, where the difference is NaN).
  r.sum = a.sum * (a.max == m ? 1.0f : __expf(a.max - m)) + b.sum * (b.max == m ? 1.0f : __expf(b.max - m));
  r.arg = b.max > a.max || (b.max == a.max && b.arg < a.arg) ? b.arg : a.arg;
  return r;
}

__device__ __forceinline__ void pick_add(PickState& st, float v, int64_t i, int64_t vocab) {
  if (st.arg == vocab) {
    st = {v, 1.0f, i};
  } else if (v > st.max) {  // ascending i: ties keep the lower id
    st.sum = st.sum * __expf(st.max - v) + 1.0f;
    st.max = v;
    st.arg = i;
  } else {
    st.sum += v == st.max ? 1.0f : __expf(v - st.max);  // equal infinities count 1, not exp(NaN)
  }
}

__global__ void __launch_bounds__(kPickThreads)
    greedy_pick_kernel(const float* __restrict__ logits, int64_t vocab, int32_t* ids, float* logprobs) {
  pdl_wait();  // programmatic dependent launch (kernels/common/pdl.cuh)
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  const int n = int(cluster.num_blocks()), rank = int(cluster.block_rank());
  const int64_t r = blockIdx.x / n;
  const float* row = logits + r * vocab;
  // This block's slice, in whole float4s where the rows allow it.
  const bool vec = vocab % 4 == 0 && (reinterpret_cast<uintptr_t>(logits) & 15) == 0;
  const int64_t per = vec ? (vocab / 4 + n - 1) / n * 4 : (vocab + n - 1) / n;
  const int64_t lo = std::min<int64_t>(vocab, rank * per), hi = std::min<int64_t>(vocab, lo + per);
  PickState st{-FLT_MAX, 0.0f, vocab};
  if (vec) {
    for (int64_t i = lo + 4 * int64_t(threadIdx.x); i < hi; i += 4 * kPickThreads) {
      const float4 q = *reinterpret_cast<const float4*>(row + i);
      pick_add(st, q.x, i, vocab);
      pick_add(st, q.y, i + 1, vocab);
      pick_add(st, q.z, i + 2, vocab);
      pick_add(st, q.w, i + 3, vocab);
    }
  } else {
    for (int64_t i = lo + threadIdx.x; i < hi; i += kPickThreads) pick_add(st, row[i], i, vocab);
  }
  for (int off = 16; off > 0; off >>= 1) {
    PickState o;
    o.max = __shfl_xor_sync(0xffffffffu, st.max, off);
    o.sum = __shfl_xor_sync(0xffffffffu, st.sum, off);
    o.arg = __shfl_xor_sync(0xffffffffu, st.arg, off);
    st = merge_pick(st, o, vocab);
  }
  __shared__ PickState s_warp[kPickThreads / 32];
  __shared__ PickState s_block[kPickMaxCluster];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) s_warp[warp] = st;
  __syncthreads();
  if (threadIdx.x == 0) {
    PickState b = s_warp[0];
    for (int w = 1; w < kPickThreads / 32; ++w) b = merge_pick(b, s_warp[w], vocab);
    cluster.map_shared_rank(s_block, 0)[rank] = b;
  }
  cluster.sync();
  if (rank == 0 && threadIdx.x == 0) {
    PickState b = s_block[0];
    for (int k = 1; k < n; ++k) b = merge_pick(b, s_block[k], vocab);
    ids[r] = int32_t(b.arg < vocab ? b.arg : 0);
    logprobs[r] = -logf(b.sum);  // log-softmax of the maximum: -log(sum of exp(x - max))
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
  // Blocks per row: as many as keep the SMs busy, up to a portable cluster of 8.
  int cluster = 1;
  while (cluster < kPickMaxCluster && rows * cluster * 2 <= device_info().sm_count) cluster *= 2;
  launch_pdl_cluster(greedy_pick_kernel, dim3(unsigned(rows * cluster)), dim3(kPickThreads), 0,
                     unsigned(cluster), stream, logits, vocab, ids, logprobs);
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
