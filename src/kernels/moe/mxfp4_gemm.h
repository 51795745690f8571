// MXFP4 expert GEMM for decode-sized batches: the 4.25-bit weights are streamed from HBM once per token tile
// and dequantized in registers, next to tensor-core MMAs with the (few) tokens as the narrow dimension.
// Decode is weight-bandwidth bound, so this is where MXFP4 beats FP8 (1.9x fewer bytes per weight).
//
// For each non-empty expert e (rows [offsets[e], offsets[e+1]) of the permuted batch):
//   y[r, 0:n] = x[src(r), 0:k] · W[e]^T,  W[e][o][c] = e2m1(blocks[e, o, c/32, (c%32)/2] nibble) * 2^(s-127)
// src(r) = x_rows[r] (e.g. routing's row_token, to gather the token rows on the fly) or r when x_rows is
// null. Activations are rounded to fp16 for the MMA (exact for bf16 values in [6.1e-5, 65504]; larger ones
// saturate to +-65504); accumulation is fp32, scaled per 32-column MX block. Output bf16 without bias. Grids
// depend only on the host bounds, so the launch is CUDA-graph capturable.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/moe/moe_activation.h"

namespace orchid::kernels {

struct Mxfp4GemmArgs {
  int num_experts = 0;
  int n = 0, k = 0;                 // n % 16 == 0, k % 32 == 0
  const int* offsets = nullptr;     // device [E+1]
  const int* active = nullptr;      // device [E]: non-empty experts (routing), -1 padded
  const int* num_active = nullptr;  // device [1]
  int max_active = 0;               // host bound on *num_active (e.g. min(E, rows)): the grid's y size
  int max_rows_per_expert = 0;      // host bound on any expert's rows (e.g. the token count): picks the tile
  const uint8_t* blocks = nullptr;  // [E, n, k/32, 16], or repacked (tiled_order)
  const uint8_t* scales = nullptr;  // [E, n, k/32] e8m0
  const void* x = nullptr;          // bf16 [*, k]
  const int* x_rows = nullptr;      // device [M] or nullptr
  void* y = nullptr;                // bf16 [M, n]; with swiglu_bias: z, bf16 [M, n/2]
  // Fused gate_up epilogue (optional): rows 2i / 2i+1 of W are gate / up (the checkpoint's interleaving);
  // y[r, i] = swiglu(acc[2i] + b[e, 2i], acc[2i+1] + b[e, 2i+1]) as in moe_swiglu_bf16, from the fp32 sums.
  const void* swiglu_bias = nullptr;  // bf16 [E, n]
  SwigluParams swiglu;
  // Shape of a CTA: warps (4 or 8) and warps sharing a 16-row block, each a slice of k (1, 2, 4 or 8,
  // dividing the warps); 0: mxfp4_stream_shape's warps and split (moe_bench times the combinations). Each
  // warp's cp.async ring has kMxfp4StreamStages chunks.
  int cta_warps = 0, k_split = 0;
  bool tiled_order = false;  // the blocks repacked at load (mxfp4_to_tiled_order: word order, 16-row groups)
  // The expert list and offsets were written before the previous kernel (the down GEMM after gate_up): the
  // scales and the first chunks of weights are requested before the dependency wait (pdl.cuh).
  bool early_weights = false;
  // The blocks' largest e8m0 scale (device [1], mxfp4_scale_max at load), or null. At most 128 (every
  // checkpoint seen: gpt-oss's scales stay below 2^1), the tiled order's bf16 weights need no bias, so the
  // kernel neither reduces one nor, at k split 1, waits for its scales before the chunk loop.
  const uint32_t* scale_max = nullptr;
};

// The CTA shape the streaming kernel takes by default for a grid of max_active experts x n rows.
struct Mxfp4StreamShape {
  int cta_warps = 8, k_split = 1;
};
Mxfp4StreamShape mxfp4_stream_shape(int n, int max_active);

// Chunks (16 rows x 4 MX blocks) in a warp's ring. 8 was measured and lost: 3.9% slower decode at one token
// (H100, bench/RESULTS.md 2026-12-05, fourth run), and never the best shape in moe_bench's sweep.
constexpr int kMxfp4StreamStages = 4;

void mxfp4_moe_gemm(const Mxfp4GemmArgs& args, cudaStream_t stream);

}  // namespace orchid::kernels
