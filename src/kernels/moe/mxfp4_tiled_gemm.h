// MXFP4 expert GEMM for batched steps (from ~8 to a few hundred rows per expert): the weights are read as
// stored in the checkpoint (4.25 bits per weight, no conversion pass, no FP8 copy) and dequantized in
// registers next to bf16 tensor-core MMAs, with a tile of token rows sharing each dequantized weight.
//
// For each work tile (expert e, token rows tok0 .. tok0 + tile_tokens of e's rows [offsets[e],
// offsets[e+1])):
//   y[r, 0:n] = x[r, 0:k] · W[e]^T,  W[e][o][c] = e2m1(blocks[e, o, c/32, (c%32)/2] nibble) * 2^(s-127)
// x holds the permuted rows (routing's order), bf16 in the tiled order (mxfp4_tiled_activation gathers and
// permutes them). The weights are dequantized to bf16 with their MX scale (exact: bf16 has fp32's exponent
// range; each warp folds an exponent bias of max(0, largest scale - 2^1) back in at the end) and multiplied
// on wgmma (mma.sync for tiles of up to 16 rows), accumulation fp32; the output is bf16 without bias, or,
// with the fused gate_up epilogue, z = SwiGLU(u + b1) in bf16, tiled order: exactly the next (down) GEMM's
// x.
//
// The tiled order: each MX block of 32 columns of x is stored permuted, element e at position
// mxfp4_tiled_pos(e). The k order inside an MMA is free as long as both operands agree; this one lets a lane
// build its A registers of both k16 steps from the 4 bytes (8 elements) of a weight row it loads, while the
// token rows stay a plain K-major wgmma operand.
//
// The work list (mxfp4_tiled_plan, on the device) depends on the routing only through the offsets, so the
// grid depends only on host bounds and a step can be captured in a CUDA graph. One plan serves both GEMMs of
// a layer when they use the same tile_tokens.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/moe/moe_activation.h"

namespace orchid::kernels {

// Token rows per CTA tile; the GEMM is instantiated for these (64 and 128: 128-row CTAs only; 128 at one CTA
// an SM, for prefill-sized steps).
constexpr int kMxfp4TileTokens[] = {16, 32, 48, 64, 128};
// The largest tile 256-row CTAs are built for (their accumulators at 64 tokens spill).
constexpr int kMxfp4TiledRows256MaxTokens = 48;

// Upper bound on the work tiles of `rows` permuted rows over `num_experts` experts (the plan's length).
int mxfp4_tiled_max_tiles(int rows, int num_experts, int tile_tokens);

// tiles: device int2 [max_tiles], written as {expert, first token row} in expert order, then {-1, 0}.
// num_experts <= kMoeMaxExperts (routing.h).
void mxfp4_tiled_plan(const int* offsets, int num_experts, int tile_tokens, int* tiles, int max_tiles,
                      cudaStream_t stream);

// Position of element e (0..31) of an MX block in the tiled order: element 8t + 4b + 2s + h (t < 4; b, s,
// h < 2) sits at 16s + 8h + 2t + b, so that k16 step s's A register pair h of the lane owning bytes
// 4t..4t+3 holds elements 8t + 2s + h and 8t + 2s + h + 4 (kernels/common/wgmma.cuh's A layout).
constexpr int mxfp4_tiled_pos(int e) {
  return 16 * ((e >> 1) & 1) + 8 * (e & 1) + 2 * (e >> 3) + ((e >> 2) & 1);
}

// out[r, :] = x[src(r), :] in the tiled order; bf16, out [rows, k], k % 32 == 0; src(r) = row_map[r] (device
// [rows]) or r. Gathering here lets the GEMM copy the token rows of a tile as boxes.
void mxfp4_tiled_activation(const void* x, int rows, int k, void* out, cudaStream_t stream,
                            const int* row_map = nullptr);

// mxfp4_tiled_activation and mxfp4_tiled_plan in one launch (what a layer's tiled path runs before its first
// GEMM): the same outputs.
void mxfp4_tiled_prepare(const void* x, int rows, int k, void* out, const int* row_map, const int* offsets,
                         int num_experts, int tile_tokens, int* tiles, int max_tiles, cudaStream_t stream);

// CTA shapes (weight rows per CTA): 256 rows copy the token rows half as often as 128 and issue two wgmmas
// per warpgroup and k16 step, 128 rows take less shared memory per stage (a deeper ring). moe_bench times
// both; mxfp4_path picks from its table. (Measured and dropped: 512 rows at one CTA per SM, 2x slower (with
// the earlier f16 MMAs); 128 rows with stages of k 256 (128-byte reads per weight row, 3 stages), 5-25%
// slower (cp.async version).)
enum class Mxfp4TiledShape : uint8_t { kRows128, kRows256 };

struct Mxfp4TiledArgs {
  Mxfp4TiledShape cta_shape = Mxfp4TiledShape::kRows128;
  int num_experts = 0;
  int n = 0, k = 0;              // n % 16 == 0, k % 32 == 0
  int tile_tokens = 32;          // one of kMxfp4TileTokens
  const int* offsets = nullptr;  // device [E+1]
  const int* tiles = nullptr;    // device int2 [max_tiles] from mxfp4_tiled_plan with the same tile_tokens
  int max_tiles = 0;
  const uint8_t* blocks = nullptr;  // [E, n, k/32, 16], or repacked (tiled_order)
  const uint8_t* scales = nullptr;  // [E, n, k/32] e8m0
  const void* x = nullptr;          // bf16 [x_row_count, k], every permuted row, tiled order
  int x_row_count = 0;              // rows of x (the token rows of a stage come as tensor copies)
  void* y = nullptr;                // bf16 [M, n]; with swiglu_bias: z, bf16 [M, n/2] in tiled order
  // Fused gate_up epilogue (optional; n % 64 == 0): rows 2i / 2i+1 of W are gate / up (the checkpoint's
  // interleaving); z[r, i] = swiglu(acc[2i] + b[e, 2i], acc[2i+1] + b[e, 2i+1]) as in moe_swiglu_bf16, from
  // the fp32 sums.
  const void* swiglu_bias = nullptr;  // bf16 [E, n]
  SwigluParams swiglu;
  bool tiled_order = false;  // the blocks repacked at load (mxfp4_to_tiled_order: word order, 16-row groups)
  // The work list and offsets were written before the previous kernel (the down GEMM after gate_up): the
  // first stages' weights are requested before the dependency wait, only the token rows wait (pdl.cuh).
  bool early_weights = false;
};

void mxfp4_tiled_gemm(const Mxfp4TiledArgs& args, cudaStream_t stream);

}  // namespace orchid::kernels
