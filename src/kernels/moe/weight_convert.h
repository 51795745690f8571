// Expert-weight conversions on the GPU, used at load (`--weights bf16|fp8` from the MXFP4 checkpoint, or
// FP8 from BF16 weights) and, per layer, for MXFP4 prefill through the FP8 grouped GEMM.
//
// MXFP4 (as stored in the checkpoint, kept as is): blocks u8 [E, n, k/32, 16] (low nibble = even element,
// e2m1 codes), scales u8 [E, n, k/32] (e8m0, 2^(s-127)); W[e][r][c] = e2m1 * 2^(s-127).
// FP8 block format: q e4m3 [E, n, kpad] (kpad = k rounded up to 128, padding zeros), scale fp32
// [E, ceil(n/128), kpad/128] (K-major), W ~= q * scale over each 128x128 block (rows r0..r0+127 clipped to
// n).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace orchid::kernels {

// How a 128x128 block's fp32 scale is chosen from the block's largest magnitude amax (0 -> scale 1):
//   kAmaxOver448: scale = amax / 448, q = e4m3(w * (448 / amax)). Uses the whole e4m3 range; every element
//                 is rounded to 3 mantissa bits relative to an arbitrary scale.
//   kPow2:        scale = the smallest power of two with amax / scale <= 448, q = e4m3(w / scale). For MXFP4
//                 sources this is exact for every element within 2^14 or so of the block maximum (an e2m1
//                 value times a power of two has 2 significant bits, e4m3 keeps 4), so it is the default
//                 there.
enum class Fp8ScaleRule : uint8_t { kAmaxOver448, kPow2 };

// Exact (every e2m1 * e8m0 product is a bf16 value). out: bf16 [E, n, k]. k % 32 == 0.
void mxfp4_to_bf16(const uint8_t* blocks, const uint8_t* scales, int experts, int n, int k, void* out,
                   cudaStream_t stream);

// expert_offsets (nullable, [E+1] device): experts with no routed rows are skipped (their output is left
// as it was), for the per-layer prefill conversion. k % 32 == 0. tiled_order: the blocks are in
// mxfp4_word_order.h's repacked form (the same output). grid: one CTA per 128 x 128 block, or a persistent
// grid whose CTAs load their next block while converting one (the same output; kDefault: the environment's
// ORCHID_MXFP4_CONVERT=pipelined picks the persistent one, until measured). sms > 0: the persistent grid
// sized for that many SMs (mxfp4_to_fp8_ctas_per_sm() CTAs each), to run beside a kernel on the others.
enum class Fp8ConvertGrid : uint8_t { kDefault, kOneCtaPerBlock, kPersistent };
void mxfp4_to_fp8_block(const uint8_t* blocks, const uint8_t* scales, int experts, int n, int k,
                        Fp8ScaleRule rule, uint8_t* out_q, float* out_scale, const int* expert_offsets,
                        cudaStream_t stream, bool tiled_order = false,
                        Fp8ConvertGrid grid = Fp8ConvertGrid::kDefault, int sms = 0);
int mxfp4_to_fp8_ctas_per_sm();  // the persistent conversion's resident CTAs an SM

// MXFP4 blocks [rows][k / 32][16 bytes] (rows % 16 == 0, 16-byte aligned) into out in the repacked form of
// mxfp4_word_order.h (grouped_bytes(rows, k) bytes, not overlapping the input): every 32-bit word in its
// order, the blocks in chunks of 16 rows, chunk-major (repacked_block). Once at load, for the expert GEMMs
// (ORCHID_MXFP4_WORD_ORDER=tiled, the default).
void mxfp4_to_tiled_order(const uint8_t* blocks, uint8_t* out, int64_t rows, int k, cudaStream_t stream);

// The largest of n e8m0 scales into *out (device, one uint32; 0 for n == 0), once at load: where it is at
// most 128 the streaming expert GEMM needs no bias for the repacked order (Mxfp4GemmArgs::scale_max).
void mxfp4_scale_max(const uint8_t* scales, int64_t n, uint32_t* out, cudaStream_t stream);

// w: bf16 [E, n, k], k % 8 == 0.
void bf16_to_fp8_block(const void* w, int experts, int n, int k, Fp8ScaleRule rule, uint8_t* out_q,
                       float* out_scale, cudaStream_t stream);

}  // namespace orchid::kernels
