// MXFP4 expert GEMM on FP8 tensor cores ("W4A8"): the weights are read as stored (4.25 bits per weight) and
// turned into e4m3 in registers with a few shifts and masks (every e2m1 value times 2^-6 is an e4m3 value,
// exactly), the activations are e4m3 with one fp32 scale per row, and Hopper's wgmma (m64nNk32, A from
// registers, B = the token rows from shared memory) multiplies them. One wgmma covers exactly one MX block
// of 32 k, so the block's e8m0 scale multiplies that wgmma's fp32 result before it joins the sum: the
// weights' scales are applied exactly, and only the activations are rounded (to e4m3, per row).
//
// Why: at the token counts of batched decode (8 to ~32 rows per expert) the bf16 tiled kernel
// (mxfp4_tiled_gemm.h) is bound by the instructions that place each weight into bf16 and by one mma.sync per
// 8 tokens; here a weight costs about a quarter of the placement instructions (four e4m3 per register
// instead of two bf16) and one wgmma serves every token of the tile.
//
// For each work tile (expert e, token rows tok0 .. tok0 + tile_tokens of e's rows, from mxfp4_tiled_plan):
//   y[r, 0:n] = x_scale[src(r)] * q[src(r), 0:k] · W[e]^T,   src(r) = x_rows[r] or r
// q: e4m3 [*, k] in "W4A8 order" (each 32-column block stored as its 16 even columns, then its 16 odd ones:
// what the register fragments of the weights pair up; mxfp4_w4a8_quantize writes it), x_scale fp32 per row.
// Output bf16 [M, n], or with the fused gate_up epilogue z = SwiGLU(u + b1), bf16 [M, n/2] in natural order.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/moe/moe_activation.h"

namespace orchid::kernels {

// Token rows per CTA tile the kernel is compiled for.
constexpr int kMxfp4W4a8TileTokens[] = {8, 16, 32};

// q[r, :] = e4m3(x[src(r), :] / s[r]) in W4A8 order, s[r] = amax(|x[src(r), :]|) / 448 (1 for an all-zero
// row), src(r) = row_map ? row_map[r] : r. x bf16 [*, k], k % 32 == 0; q [rows, k]; scale [rows].
void mxfp4_w4a8_quantize(const void* x, const int* row_map, int rows, int k, uint8_t* q, float* scale,
                         cudaStream_t stream);

struct Mxfp4W4a8Args {
  int num_experts = 0;
  int n = 0, k = 0;              // n % 16 == 0, k % 32 == 0
  int tile_tokens = 16;          // one of kMxfp4W4a8TileTokens
  const int* offsets = nullptr;  // device [E+1]
  const int* tiles = nullptr;    // device int2 [max_tiles] from mxfp4_tiled_plan with the same tile_tokens
  int max_tiles = 0;
  const uint8_t* blocks = nullptr;  // [E, n, k/32, 16]
  const uint8_t* scales = nullptr;  // [E, n, k/32] e8m0
  const uint8_t* x = nullptr;       // e4m3 [*, k], W4A8 order
  const float* x_scale = nullptr;   // [*]
  const int* x_rows = nullptr;      // device [M] or nullptr
  void* y = nullptr;                // bf16 [M, n]; with swiglu_bias: z, bf16 [M, n/2]
  // Fused gate_up epilogue (optional), as in Mxfp4TiledArgs: rows 2i / 2i+1 of W are gate / up.
  const void* swiglu_bias = nullptr;  // bf16 [E, n]
  SwigluParams swiglu;
};

void mxfp4_w4a8_gemm(const Mxfp4W4a8Args& args, cudaStream_t stream);

}  // namespace orchid::kernels
