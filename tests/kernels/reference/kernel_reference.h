// Plain C++ references for the GEMM and MoE kernels (fp32 inputs, fp64 accumulation where it matters).
// They are written from the model's definition (docs: ../shared/specs/gpt-oss-model.md §2-3), independently
// of the CUDA code; the quantization rules mirror the documented ones bit for bit (core/dtypes.h encoders).
#pragma once

#include <cstdint>
#include <vector>

namespace orchid::ref {

// y[m, n] = x[m, k] · w[n, k]^T (+ bias[n]); x rows ldx apart. fp64 accumulation, multithreaded.
void gemm(int m, int n, int k, const float* x, int64_t ldx, const float* w, const float* bias, double* y);

// Top-k by logit (ties: lower expert), softmax over the k selected (fp64, rounded to fp32).
void topk_softmax(const float* logits, int num_tokens, int num_experts, int top_k, int* idx, float* w);

// Stable permutation by expert (see kernels/moe/routing.h).
struct Permutation {
  std::vector<int> offsets, row_token, row_expert, slot_row, active;
};
Permutation permute(const int* topk_idx, int num_tokens, int num_experts, int top_k);

// 1x128 FP8 group quantization of one row of k values (zero-padded to kpad = k rounded up to 128):
// amax = max|v|, scale = amax/448, q = e4m3(v * (448/amax)); an all-zero group gets scale 1.
void quant_fp8_row(const float* v, int k, uint8_t* q, float* scale);

// Clamped SwiGLU of gpt-oss on biased gate/up values (fp32, the kernel's formula).
float swiglu(float gate, float up, float limit, float alpha);

// MXFP4 rows (blocks [rows, k/32, 16], scales [rows, k/32]) to float, exact.
void mxfp4_to_float(const uint8_t* blocks, const uint8_t* scales, int64_t rows, int k, float* out);

// 128x128 FP8 block quantization of w [E, n, k] -> q [E, n, kpad], scale [E, ceil(n/128), kpad/128].
enum class Fp8Rule { kAmaxOver448, kPow2 };
void fp8_block_quant(const float* w, int experts, int n, int k, Fp8Rule rule, uint8_t* q, float* scale);
// Dequantized view of that format: out [E, n, k].
void fp8_block_dequant(const uint8_t* q, const float* scale, int experts, int n, int k, float* out);

}  // namespace orchid::ref
