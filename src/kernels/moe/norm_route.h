// The part of a small decode batch's layer between the O projection and the experts, in one launch instead
// of three (the residual RMSNorm, the router GEMM over its hi and lo rows, the routing): at one token each of
// those kernels is a few microseconds of launch and dependency latency for almost no work.
//
//   residual += delta;  out = bf16((residual * rsqrt(mean(residual^2) + eps)) * gamma)
//   logits[t, e] = sum_c y[t, c] * router_w[e, c] + router_b[e]
//   top-k + softmax over the k, and the permutation of (token, slot) pairs by expert (routing.h)
//
// residual and out are bit for bit what norm::rmsnorm_residual writes (the same sum-of-squares order). The
// router reads y, the norm output before its bf16 rounding (precise routing: what the split router's hi +
// lo rows approximate), or bf16(y) (precise = false, as a router GEMM on out). Its dot products run in fp32
// in a fixed order, so a near-tie between the k-th and (k+1)-th expert can resolve differently from a GEMM
// library's; routing agrees wherever the logits are decided.
//
// A cluster of up to 8 blocks; block r scores experts [r * per_block, (r + 1) * per_block), its warps one
// expert each with the expert's router row in registers (loaded before the dependency wait: weights), and
// sends its logits to block 0's shared memory, which routes.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "kernels/moe/routing.h"

namespace orchid::kernels {

constexpr int kNormRouteMaxTokens = 8;

struct NormRouteArgs {
  float* residual = nullptr;             // fp32 [T, H], updated in place
  const __nv_bfloat16* delta = nullptr;  // bf16 [T, H] (the O projection with its bias)
  const float* gamma = nullptr;          // fp32 [H]
  float eps = 1e-5f;
  __nv_bfloat16* out = nullptr;             // bf16 [T, H]: the experts' input
  const __nv_bfloat16* router_w = nullptr;  // bf16 [E, H]
  const float* router_b = nullptr;          // fp32 [E]
  bool precise = true;                      // route on y (fp32) rather than on out
  float* logits = nullptr;                  // fp32 [T, E], bias included (written for inspection)
  int* topk_idx = nullptr;                  // [T, k]
  float* topk_w = nullptr;                  // [T, k]
  MoeRouting routing;                       // routing.h
  MoeExpertRange range;                     // expert parallelism: routing.h
  int num_tokens = 0, hidden = 0, num_experts = 0, top_k = 0;
};

// Whether moe_norm_route takes these shapes (else: the three kernels).
bool norm_route_fits(int num_tokens, int hidden, int num_experts, int top_k);

void moe_norm_route(const NormRouteArgs& a, cudaStream_t stream);

}  // namespace orchid::kernels
