// The router and the routing of a batch in one launch, where they took two (the router GEMM and the one-block
// routing, up to 32 tokens) to five (the GEMM, top-k, and the three permutation passes) kernels:
//
//   logits[t, e] = x[t] . router_w[e] (+ router_b[e])     over the hi and lo rows of a split input
//   top-k + softmax over the k, and the permutation of (token, slot) pairs by expert (routing.h)
//
// At 256 decode tokens of gpt-oss-20b the router is 47 MFLOP and 3 MB of activations; the five kernels cost
// ~16 us a layer on an H200 (bench/RESULTS.md, the B=256 breakdown), almost all launch and dependency
// latency.
//
// How: a CTA per (group of 16 tokens, slice of k). It stages the slice of the router rows (before the
// dependency wait: weights) and of its tokens' hi and lo rows in shared memory and runs bf16 mma.sync (fp32
// accumulators) for the partial logits, which go to the scratch. The last CTA of a group to finish (a ticket
// per group) sums the slices in slice order, writes the logits and ranks its tokens' top-k; the last group to
// finish (a second ticket) reads every token's picks back and permutes them. Deterministic: every sum runs in
// a fixed order, whichever CTA finishes last.
//
// Semantics, as the kernels it replaces: with a split input (x = hi rows, then lo rows: fp32 activations as
// two bf16 halves) the logit of (t, e) is (hi . w + lo . w) + bias and `logits` gets the hi and lo rows' dot
// products without the bias ([2T, E], as the split router GEMM writes them); else x . w + bias ([T, E]).
// The dot products' summation order differs from a GEMM library's, so a near-tie between the k-th and the
// (k+1)-th expert can resolve differently; routing agrees wherever the logits are decided. top-k, the weights
// and the permutation are moe_route's on the kernel's own logits, bit for bit.
//
// The scratch's tickets must be zero before the first launch (router_route_scratch_init); each launch
// leaves them zero.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>

#include "kernels/moe/routing.h"

namespace orchid::kernels {

// The permutation runs in one block: at most this many (token, slot) pairs.
constexpr int kRouterRouteMaxItems = 1024;

struct RouterRouteArgs {
  const __nv_bfloat16* x = nullptr;  // [T, H], or with split [2T, H]: the hi rows, then the lo rows
  bool split = false;
  const __nv_bfloat16* router_w = nullptr;  // bf16 [E, H]
  const float* router_b = nullptr;          // fp32 [E]
  float* logits = nullptr;                  // split: [2T, E] without the bias; else [T, E] with it
  int* topk_idx = nullptr;                  // [T, k]
  float* topk_w = nullptr;                  // [T, k]
  MoeRouting routing;                       // routing.h
  MoeExpertRange range;                     // expert parallelism: routing.h
  void* scratch = nullptr;                  // router_route_scratch_bytes(>= T, E), 256-byte aligned
  int num_tokens = 0, hidden = 0, num_experts = 0, top_k = 0;
  // Optional: the post-attention residual add and RMSNorm in the same launch (as norm_route.h does at 1-2
  // tokens): residual += delta; y = (residual * rsqrt(mean(residual^2) + eps)) * gamma; out = bf16(y), the
  // experts' input (with split the lo halves stay on chip, where the router reads them; x is not read).
  // residual and out are bit for bit norm::rmsnorm_residual(_split)'s. Each CTA of a cluster of 8 norms two
  // of the group's tokens and sends each slice's part of them to that slice's CTA (distributed shared
  // memory). residual null: no norm, the router reads x.
  float* residual = nullptr;             // fp32 [T, H], updated in place
  const __nv_bfloat16* delta = nullptr;  // bf16 [T, H]
  const float* gamma = nullptr;          // fp32 [H]
  float eps = 1e-5f;
  __nv_bfloat16* out = nullptr;  // bf16 [T, H]: the hi rows (x is not read)
};

// Whether moe_router_route takes these shapes (else: the router GEMM and moe_route); with_norm: with the
// input norm (RouterRouteArgs::residual).
bool router_route_fits(int num_tokens, int hidden, int num_experts, int top_k, bool with_norm = false);

size_t router_route_scratch_bytes(int max_tokens, int num_experts);
// Zeroes the scratch's tickets (once, after allocating it).
void router_route_scratch_init(void* scratch, cudaStream_t stream);

void moe_router_route(const RouterRouteArgs& a, cudaStream_t stream);

}  // namespace orchid::kernels
