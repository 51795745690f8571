// Small memory-bound kernels around the model's big blocks: the embedding lookup, row gathers, dtype
// conversions and the greedy pick with its log-softmax. Each is one pass over its bytes.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace orchid::kernels::ops {

// x[t, :] = float(table[ids[t], :]) for t < rows; hidden % 8 == 0, 16-byte aligned rows.
void embedding_gather(const __nv_bfloat16* table, const int32_t* ids, float* x, int64_t rows, int64_t hidden,
                      cudaStream_t stream);

// dst[r, :] = src[index[r], :] (fp32 rows of `cols`), r < rows.
void gather_rows_f32(const float* src, const int32_t* index, float* dst, int64_t rows, int64_t cols,
                     cudaStream_t stream);

// dst[i] = float(src[i]).
void bf16_to_f32(const __nv_bfloat16* src, float* dst, int64_t n, cudaStream_t stream);
// dst[i] = bf16(src[i]) (round to nearest even).
void f32_to_bf16(const float* src, __nv_bfloat16* dst, int64_t n, cudaStream_t stream);

// x[i] += d[i] (fp32), i < n.
void add_f32(float* x, const float* d, int64_t n, cudaStream_t stream);

// out[i] = ((src[0][i] + src[1][i]) + src[2][i]) + ... over `count` buffers in that order (fp32), i < n:
// the sum every rank of a group on one device computes alike (runtime/cuda/device_communicator.h).
inline constexpr int kMaxSumBuffers = 16;
struct SumSources {
  const float* p[kMaxSumBuffers];
};
void sum_f32(const SumSources& src, int count, int64_t n, float* out, cudaStream_t stream);

// Many device-to-device copies in one launch (K/V pages handed over in place, runtime/kv_share.h): span i
// copies bytes [0, spans[i].bytes) of spans[i].src to spans[i].dst. Addresses 16-byte aligned, sizes
// multiples of 16, spans not overlapping; `spans` itself is in device memory. One launch instead of one
// cudaMemcpy per page (a prompt of 8k tokens has ~12k pages of K and V).
struct CopySpan {
  const void* src;
  void* dst;
  uint64_t bytes;
};
void copy_spans(const CopySpan* spans, int64_t n, cudaStream_t stream);

// Pipelined steps (runtime::TokenFromPrevious): tokens[pairs[2i]] = src[pairs[2i + 1] * src_stride] for
// i < n, where src holds the step before's sampled ids (`src_stride` int32 words apart: a plain id array,
// or the id field of the sampler's result rows). `pairs` is in device memory. A negative id (the sampler's
// "every token banned", which the host reports as an error) is written as 0, so the step stays in bounds.
void scatter_tokens(const int32_t* src, int64_t src_stride, const int32_t* pairs, int64_t n, int32_t* tokens,
                    cudaStream_t stream);

// Per row of logits [rows, vocab] (fp32): the arg-max (lowest id on ties) and its log-softmax value.
void greedy_pick(const float* logits, int64_t rows, int64_t vocab, int32_t* ids, float* logprobs,
                 cudaStream_t stream);

}  // namespace orchid::kernels::ops
