// MXFP4 expert GEMM for prefill-sized steps (hundreds to thousands of rows per expert) on FP8 tensor cores:
// the weights are read as stored (4.25 bits, the repacked tiled word order), placed into e4m3 in registers
// and multiplied by e4m3 activations with wgmma m64nNk32, at twice the bf16 rate and with no conversion pass
// and no FP8 copy of the experts (the path it replaces converted every used expert to FP8 each step).
//
// Numerics. A weight row's MX block scales 2^s are folded into the e4m3 bytes relative to a per-row
// exponent c = (largest s of the row) - 6: byte = e4m3(e2m1 * 2^(s - c)), exact for s >= c - 7 (blocks 13
// binades below the row's largest; below, rounded to nearest even), the epilogue multiplies by 2^(c - 127).
// Activations are e4m3 with one scale per row (amax / 448) for gate_up; for down, the SwiGLU output is
// bounded by limit * (limit + 1) (|gate * sigmoid| <= limit, |up + 1| <= limit + 1) and takes one fixed
// power-of-two scale (mxfp4_w4a8_z_scale), so the gate_up epilogue writes it as e4m3 directly. e4m3
// keeps 4 significant bits: the FP8 path's error, not the bf16 tiled kernel's.
//
// Work: the tiles of mxfp4_tiled_plan with kMxfp4W4a8TileTokens; a CTA takes 128 weight rows of one expert
// x up to 256 of its token rows; the token rows in the W4A8 order (mxfp4_w4a8_activation).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/moe/moe_activation.h"

namespace orchid::kernels {

constexpr int kMxfp4W4a8TileTokens = 256;

// The fixed scale of the SwiGLU output: the smallest power of two with limit * (limit + 1) / scale <= 448;
// 0 where the limit is not finite and positive (no bound: the W4A8 down GEMM does not apply).
float mxfp4_w4a8_z_scale(const SwigluParams& sp);

// out[r, :] = e4m3(x[src(r), :] / scale[r]) in the W4A8 order (each MX block of 32 columns permuted by
// mxfp4_order::w4a8_pos), scale[r] = amax(x[src(r), :]) / 448 (1 for an all-zero row); src(r) = row_map[r]
// or r. x bf16 [*, k], out [rows, k] bytes, k % 32 == 0.
void mxfp4_w4a8_activation(const void* x, int rows, int k, uint8_t* out, float* scale, cudaStream_t stream,
                           const int* row_map = nullptr);

struct Mxfp4W4a8Args {
  int num_experts = 0;
  int n = 0, k = 0;              // n % 128 == 0, k % 32 == 0
  const int* offsets = nullptr;  // device [E+1]
  const int* tiles = nullptr;    // device int2 [max_tiles]: mxfp4_tiled_plan with kMxfp4W4a8TileTokens
  int max_tiles = 0;
  const uint8_t* blocks = nullptr;  // repacked, tiled word order (mxfp4_to_tiled_order)
  const uint8_t* scales = nullptr;  // [E, n, k/32] e8m0
  const uint8_t* x = nullptr;       // e4m3 [x_row_count, k], every permuted row, W4A8 order
  int x_row_count = 0;
  const float* x_scale = nullptr;  // [x_row_count] per-row scales, or nullptr: x_scale_all for every row
  float x_scale_all = 1.0f;
  // bf16 [M, n]; with swiglu_bias: z = SwiGLU(acc + b1) / z_scale as e4m3 [M, n/2] in the W4A8 order (the
  // down GEMM's x as is, with x_scale_all = z_scale); rows 2i / 2i+1 of W are gate / up.
  void* y = nullptr;
  const void* swiglu_bias = nullptr;  // bf16 [E, n]
  SwigluParams swiglu;
  float z_scale = 0.0f;  // mxfp4_w4a8_z_scale(swiglu)
  // Persistent grid of min(work items, max_ctas) CTAs (0: the SM count, one CTA an SM); a large value gives
  // one CTA a work item (128 weight rows x a tile), tests a small one so each CTA takes many items.
  int max_ctas = 0;
};

void mxfp4_w4a8_gemm(const Mxfp4W4a8Args& args, cudaStream_t stream);

}  // namespace orchid::kernels
