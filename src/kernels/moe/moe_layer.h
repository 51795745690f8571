// One gpt-oss MoE block on the GPU, from the post-attention-norm activations h to the residual update:
//   logits = h Wr^T + br  ->  top-k, softmax over the k  ->  permute rows by expert
//   u = W1[e] h (+ b1 in the SwiGLU kernel)  ->  z = clamped SwiGLU(u)  ->  y = W2[e] z
//   x[t] += sum_j w_j (y_j + b2[e_j])   (fixed order j = 0..k-1: deterministic)
// Everything stays on the device (no host sync); grids depend only on the token count, so a decode step of
// a fixed batch size can be captured in a CUDA graph.
//
// Expert weight formats (chosen at load, `--weights`):
//   kBf16:  w1 bf16 [E, 2I, H], w2 bf16 [E, H, I]                           -> BF16 grouped GEMM
//   kFp8:   w1 e4m3 [E, 2I, Hp] + fp32 [E, 2I/128, Hp/128], w2 e4m3 [E, H, Ip] + fp32 [E, ceil(H/128),
//   Ip/128]
//           (Hp, Ip = H, I rounded up to 128; weight_convert.h makes them)   -> FP8 blockwise grouped GEMM
//   kMxfp4: w1 blocks u8 [E, 2I, H/32, 16] + e8m0 [E, 2I, H/32], w2 [E, H, I/32, 16] + [E, H, I/32], as in
//           the checkpoint, read as stored by the MXFP4 kernels (mxfp4_path() picks one per step): the
//           streaming kernel for the smallest batches, the tiled kernel above; beyond mxfp4_tiled_max_tokens
//           (long prefill chunks) the W4A8 GEMM on FP8 tensor cores (twice the f16 MMAs' rate) where the
//           blocks are in the tiled order, else the layer's used experts converted to the FP8 block format
//           in the workspace for the FP8 path.
// gate_up rows are interleaved (even = gate, odd = up), as in the checkpoint.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/gemm/dense_gemm.h"
#include "kernels/gemm/grouped_gemm.h"
#include "kernels/moe/mxfp4_tiled_gemm.h"
#include "kernels/moe/routing.h"

namespace orchid::kernels {

enum class MoeWeights : uint8_t { kBf16, kFp8, kMxfp4 };

struct MoeConfig {
  int hidden = 2880, inter = 2880, experts = 32, top_k = 4;
  float swiglu_limit = 7.0f, swiglu_alpha = 1.702f;
  MoeWeights weights = MoeWeights::kMxfp4;
  int max_tokens = 1;  // the largest num_tokens a forward call will get (workspace sizing)
  // MXFP4 only: up to mxfp4_stream_max_tokens tokens the streaming kernel, up to mxfp4_tiled_max_tokens the
  // tiled kernel (tile size from mxfp4_path's measured table), above the FP8 conversion. -1: the measured
  // defaults (moe_layer.cu; the tiled one scales with the expert count).
  int mxfp4_stream_max_tokens = -1;
  int mxfp4_tiled_max_tokens = -1;
  // MXFP4 tiled steps: the down GEMM's CTA rows (128 or 256) where its tile allows either; 0: as gate_up
  // (the table's shape). The down GEMM has half gate_up's rows: at 256-row CTAs its grid is 1.45 waves of
  // two CTAs an SM at 32 experts, at 128 rows 2.8.
  int mxfp4_down_rows = 0;
  // MXFP4 only: the expert blocks' words are in mxfp4_word_order.h's order (mxfp4_to_tiled_order at load),
  // which every MXFP4 kernel of the layer then decodes.
  bool mxfp4_tiled_order = false;
  // MXFP4 steps above the tiled kernel's range: the W4A8 GEMM (mxfp4_w4a8_gemm.h: the blocks as stored,
  // e4m3 activations) instead of converting the used experts to FP8 each step. Needs the tiled order and a
  // finite SwiGLU clamp (its output's fixed scale); otherwise (or false) the conversion runs.
  bool mxfp4_w4a8 = true;
  // The W4A8 GEMM's grid (Mxfp4W4a8Args::max_ctas): 0 persistent, one CTA an SM; a large value, one CTA a
  // work item (comparisons).
  int mxfp4_w4a8_ctas = 0;
  Fp8GroupedConfig fp8_config = Fp8GroupedConfig::kCooperative128x128;
  // Expert parallelism: the experts this rank holds and computes (routing.h); the layer weights' expert
  // tensors and biases then hold just these. Default: every expert.
  MoeExpertRange local;
  int local_experts() const { return local.count > 0 ? local.count : experts; }
};

// Where the block's result goes: added to the residual stream (a rank holding every expert), or stored as
// this rank's part of it (expert parallelism: the parts are summed across ranks, then added).
enum class MoeOutput : uint8_t { kAddToResidual, kStorePart };

// Which MXFP4 kernel a step of num_tokens tokens takes.
struct Mxfp4Path {
  enum Kind : uint8_t { kStream, kTiled, kConvertFp8, kW4a8 } kind = kStream;
  Mxfp4TiledShape shape = Mxfp4TiledShape::kRows128;       // kTiled: CTA shape and token rows per tile
  Mxfp4TiledShape down_shape = Mxfp4TiledShape::kRows128;  // kTiled: the down GEMM's CTA shape
  int tile_tokens = 0;
};
Mxfp4Path mxfp4_path(const MoeConfig& cfg, int num_tokens);

struct MoeLayerWeights {            // expert tensors and biases: the experts of MoeConfig::local
  const void* router_w = nullptr;   // bf16 [E, H]
  const float* router_b = nullptr;  // fp32 [E] (the checkpoint's bf16 bias, converted at load)
  const void* w1 = nullptr;         // see the format table above
  const void* w1_scale = nullptr;
  const void* w2 = nullptr;
  const void* w2_scale = nullptr;
  const void* b1 = nullptr;  // bf16 [E, 2I]
  const void* b2 = nullptr;  // bf16 [E, H]
  // MXFP4: each tensor's largest e8m0 scale (device [1], mxfp4_scale_max at load), or null (unknown).
  const uint32_t* w1_scale_max = nullptr;
  const uint32_t* w2_scale_max = nullptr;
};

// Every intermediate, carved out of the workspace (exposed so tests can check each stage).
struct MoeBuffers {
  float* logits = nullptr;  // [T, E] (split input: [2T, E], the hi rows' then the lo rows')
  int* topk_idx = nullptr;  // [T, k]
  float* topk_w = nullptr;  // [T, k]
  MoeRouting routing;
  void* permute_scratch = nullptr;
  void* route_scratch = nullptr;  // moe_router_route's (router_route.h), where its shapes fit
  uint8_t* a_q = nullptr;         // FP8 expert input [M, Hp] + scales [M, Hp/128]
  float* a_scale = nullptr;
  void* a_bf16 = nullptr;   // BF16 expert input [M, H]
  void* u = nullptr;        // gate_up output, bf16 [M, 2I], no bias (unused on the fused MXFP4 paths)
  void* x_tiled = nullptr;  // MXFP4 tiled: the permuted expert input rows in the tiled order, bf16 [M, H]
  int* tiles = nullptr;     // MXFP4 tiled: the work list (int2 per tile)
  uint8_t* z_q = nullptr;   // SwiGLU output, FP8 [M, Ip] + scales [M, Ip/128]
  float* z_scale = nullptr;
  void* z_bf16 = nullptr;     // SwiGLU output, bf16 [M, I] (MXFP4 tiled: in the tiled order)
  void* y = nullptr;          // down output, bf16 [M, H], no bias
  uint8_t* w1_fp8 = nullptr;  // MXFP4 prefill: the layer's experts in the FP8 block format
  float* w1_fp8_scale = nullptr;
  uint8_t* w2_fp8 = nullptr;
  float* w2_fp8_scale = nullptr;
  void* grouped_ws = nullptr;
  size_t grouped_ws_bytes = 0;
};

size_t moe_workspace_bytes(const MoeConfig& cfg);
MoeBuffers moe_buffers(const MoeConfig& cfg, void* workspace);  // workspace: 256-byte aligned
// Once, after allocating the workspace and before its first moe_forward: zeroes the counters the fused
// router kernel leaves zero after each launch.
void moe_workspace_init(const MoeConfig& cfg, void* workspace, cudaStream_t stream);

// Whether the router, top-k and permutation of a step of num_tokens tokens run as one launch
// (moe_router_route) rather than the router GEMM and moe_route: by default with the block's input norm
// (in_norm) in that launch too, from 8 tokens where there are at most 32 experts (measured faster there);
// ORCHID_ROUTER_ROUTE=0 / 1 / 2 forces the two kernels / the launch without the norm / with it.
bool moe_router_route_taken(const MoeConfig& cfg, int num_tokens);

// The next layer's input RMSNorm, done by the combine as it writes the residual (moe_combine_norm): gamma
// fp32 [H], out bf16 [T, H] (may be h: the experts have read it by then).
struct MoeNextNorm {
  const float* gamma = nullptr;
  void* out = nullptr;
  float eps = 0.0f;
};

// h: bf16 [T, H]; x: fp32 [T, H], updated in place (kAddToResidual) or overwritten with this rank's part.
// router_gemm serves the router projection (its own cuBLASLt workspace) where moe_router_route_taken is
// false. 1 <= num_tokens <= cfg.max_tokens.
// split_input: h holds 2T rows, the BF16 halves of an fp32 input (rmsnorm_residual_split): hi in rows
// 0..T-1, lo in rows T..2T-1. The router reads hi + lo (one GEMM over the 2T rows: near-ties between the
// 4th and 5th expert resolve as in fp32), the experts read hi alone. next_norm (kAddToResidual only):
// also the next layer's input norm of the updated x.
// The post-attention residual add and RMSNorm, done by the block before it routes (moe_forward's in_norm):
// residual += delta, then out = RMSNorm(residual) * gamma as norm::rmsnorm_residual writes it (hi then lo
// rows with split_input, as rmsnorm_residual_split). out is moe_forward's h. Where moe_norm_route_taken (1-2
// tokens) the norm, the router and the routing are one launch (norm_route.h), whose router reads the fp32
// norm output (split_input) or its bf16 rounding and which writes no lo rows; else the norm kernel, then the
// router GEMM and the routing as without in_norm.
struct MoeInputNorm {
  float* residual = nullptr;    // fp32 [T, H]
  const void* delta = nullptr;  // bf16 [T, H]
  const float* gamma = nullptr;
  float eps = 0.0f;
  void* out = nullptr;  // == h
};

bool moe_norm_route_taken(const MoeConfig& cfg, int num_tokens);

void moe_forward(const MoeConfig& cfg, const MoeLayerWeights& w, const void* h, float* x, int num_tokens,
                 DenseGemm& router_gemm, void* workspace, cudaStream_t stream, bool split_input = false,
                 MoeOutput output = MoeOutput::kAddToResidual, const MoeNextNorm* next_norm = nullptr,
                 const MoeInputNorm* in_norm = nullptr);

}  // namespace orchid::kernels
