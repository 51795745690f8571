// MXFP4 expert GEMM for batched steps (from ~8 to a few hundred rows per expert): the weights are read as
// stored in the checkpoint (4.25 bits per weight, no conversion pass, no FP8 copy) and dequantized in
// registers next to bf16 tensor-core MMAs, with a tile of token rows sharing each dequantized weight.
//
// For each work tile (expert e, token rows tok0 .. tok0 + tile_tokens of e's rows [offsets[e],
// offsets[e+1])):
//   y[r, 0:n] = x[src(r), 0:k] · W[e]^T,  W[e][o][c] = e2m1(blocks[e, o, c/32, (c%32)/2] nibble) * 2^(s-127)
// src(r) = x_rows[r] (routing's row_token: the token rows are gathered on the fly) or r when x_rows is null.
// x is bf16 in MX order (mxfp4_activation_mx permutes it; mxfp4_mma.cuh says why that order). The weights
// are dequantized to bf16 with their MX scale (exact: bf16 has fp32's exponent range; each warp folds an
// exponent bias of max(0, largest scale - 2^1) back in at the end), accumulation is fp32; the output is bf16
// without bias, or, with the fused gate_up epilogue, z = SwiGLU(u + b1) in bf16 MX order: exactly the next
// (down) GEMM's x.
//
// The work list (mxfp4_tiled_plan, on the device) depends on the routing only through the offsets, so the
// grid depends only on host bounds and a step can be captured in a CUDA graph. One plan serves both GEMMs of
// a layer when they use the same tile_tokens.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/moe/moe_activation.h"

namespace orchid::kernels {

// Token rows per CTA tile; the GEMM is instantiated for these.
constexpr int kMxfp4TileTokens[] = {16, 32, 48, 64};

// Upper bound on the work tiles of `rows` permuted rows over `num_experts` experts (the plan's length).
int mxfp4_tiled_max_tiles(int rows, int num_experts, int tile_tokens);

// tiles: device int2 [max_tiles], written as {expert, first token row} in expert order, then {-1, 0}.
// num_experts <= kMoeMaxExperts (routing.h).
void mxfp4_tiled_plan(const int* offsets, int num_experts, int tile_tokens, int* tiles, int max_tiles,
                      cudaStream_t stream);

// out[r, :] = x[src(r), :] in MX order (each group of 8 columns stored as [0,4,1,5,2,6,3,7]); bf16, out
// [rows, k], k % 8 == 0; src(r) = row_map[r] (device [rows]) or r. Gathering here lets the GEMM copy the
// token rows of a tile as boxes (x_row_count below).
void mxfp4_activation_mx(const void* x, int rows, int k, void* out, cudaStream_t stream,
                         const int* row_map = nullptr);

// CTA shapes (weight rows per CTA): 256 rows copy and re-read the token rows half as often as 128 (one bulk
// copy per token row and stage), 128 rows take less shared memory per stage (a deeper ring). moe_bench
// times both; mxfp4_path picks from its table (256 rows won every decode size measured with the producer
// warp). (Measured and dropped: 512 rows at one CTA per SM, 2x slower (with the earlier f16 MMAs); 128
// rows with stages of k 256 (128-byte reads per weight row, 3 stages), 5-25% slower (cp.async version).)
enum class Mxfp4TiledShape : uint8_t { kRows128, kRows256 };

struct Mxfp4TiledArgs {
  Mxfp4TiledShape cta_shape = Mxfp4TiledShape::kRows128;
  int num_experts = 0;
  int n = 0, k = 0;              // n % 16 == 0, k % 32 == 0
  int tile_tokens = 32;          // one of kMxfp4TileTokens
  const int* offsets = nullptr;  // device [E+1]
  const int* tiles = nullptr;    // device int2 [max_tiles] from mxfp4_tiled_plan with the same tile_tokens
  int max_tiles = 0;
  const uint8_t* blocks = nullptr;  // [E, n, k/32, 16]
  const uint8_t* scales = nullptr;  // [E, n, k/32] e8m0
  const void* x = nullptr;          // bf16 [*, k], MX order
  const int* x_rows = nullptr;      // device [M] or nullptr
  // Rows of x when x_rows is null: then the token rows of a stage come as tensor copies (x must hold every
  // permuted row). 0: one bulk copy per token row.
  int x_row_count = 0;
  void* y = nullptr;  // bf16 [M, n]; with swiglu_bias: z, bf16 [M, n/2] in MX order
  // Fused gate_up epilogue (optional): rows 2i / 2i+1 of W are gate / up (the checkpoint's interleaving);
  // z[r, i] = swiglu(acc[2i] + b[e, 2i], acc[2i+1] + b[e, 2i+1]) as in moe_swiglu_bf16, from the fp32 sums.
  const void* swiglu_bias = nullptr;  // bf16 [E, n]
  SwigluParams swiglu;
};

void mxfp4_tiled_gemm(const Mxfp4TiledArgs& args, cudaStream_t stream);

}  // namespace orchid::kernels
