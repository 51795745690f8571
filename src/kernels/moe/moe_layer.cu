#include "kernels/moe/moe_layer.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "kernels/common/cuda_check.h"
#include "kernels/gemm/grouped_gemm.h"
#include "kernels/moe/moe_activation.h"
#include "kernels/moe/mxfp4_gemm.h"
#include "kernels/moe/mxfp4_tiled_gemm.h"
#include "kernels/moe/mxfp4_w4a8_gemm.h"
#include "kernels/moe/norm_route.h"
#include "kernels/moe/router_route.h"
#include "kernels/moe/weight_convert.h"
#include "kernels/norm/rmsnorm.h"

namespace orchid::kernels {
namespace {

size_t align256(size_t x) {
  return (x + 255) & ~size_t(255);
}

// Measured defaults (bench/RESULTS.md, moe_bench "mxfp4 stream", "mxfp4 tiled" and "moe layer mxfp4-*" on
// an H200, gpt-oss-20b shapes, and `orchid bench decode` steps at batch 1-16): the streaming kernel wins up
// to 2 tokens (the tiled kernel with its producer warp from 4: decode step at batch 8 4.33 ms against 4.71),
// the FP8 conversion path (twice the tensor rate) from ~1024 tokens on, the tiled kernel in between.
constexpr int kStreamMaxTokens = 2;
constexpr int kTiledMaxTokens = 1024;
// ... at 32 experts. The conversion's fixed cost (every used expert, all of them at these token counts)
// grows with the expert count, while the tiled kernel's and the FP8 GEMM's cost per token do not (a token
// adds the same (row tile, expert) work once each expert has a tile of rows: 120b at 2048 tokens runs the
// 128 tiles 20b runs at 2048). So the crossover scales with the experts: ~4096 tokens at 120b's 128, where
// the conversion is ~1.6 ms a layer against 20b's 0.39.
constexpr int kTiledMaxTokensExperts = 32;
// Tiled: the CTA shape and tile of token rows by the average rows per expert (T * k / E), smallest first.
struct TileChoice {
  int max_avg_rows;
  Mxfp4TiledShape shape;
  int tile_tokens;
};
// (moe_bench "mxfp4 tiled", 2026-12-04: at ~8 rows an expert 256 x 16 wins (mma.sync), at ~32 256 x 48 and
// 128 x 48 tie (wgmma), at ~128 128 x 64 is 4-5% ahead of 256 x 48.) Above 128 rows an expert (only where
// ORCHID_MXFP4_TILED_MAX_TOKENS raises the crossover, until measured) 128 x 128 tiles at one CTA an SM: twice
// the tokens per dequantized weight.
constexpr TileChoice kTileTable[] = {{12, Mxfp4TiledShape::kRows256, 16},
                                     {24, Mxfp4TiledShape::kRows256, 32},
                                     {64, Mxfp4TiledShape::kRows256, 48},
                                     {128, Mxfp4TiledShape::kRows128, 64},
                                     {1 << 30, Mxfp4TiledShape::kRows128, 128}};

int stream_max(const MoeConfig& c) {
  return c.mxfp4_stream_max_tokens >= 0 ? c.mxfp4_stream_max_tokens : kStreamMaxTokens;
}
int tiled_max(const MoeConfig& c) {
  if (c.mxfp4_tiled_max_tokens >= 0) return c.mxfp4_tiled_max_tokens;
  return kTiledMaxTokens * std::max(1, c.experts / kTiledMaxTokensExperts);
}
bool needs_fp8_path(const MoeConfig& c) {
  return c.weights == MoeWeights::kFp8 || (c.weights == MoeWeights::kMxfp4 && c.max_tokens > tiled_max(c));
}
bool needs_tiled(const MoeConfig& c) {
  return c.weights == MoeWeights::kMxfp4 && c.max_tokens > stream_max(c) && tiled_max(c) > stream_max(c);
}
// Steps above the tiled range take the W4A8 GEMM (no FP8 copies of the experts) where the config asks and
// the layer allows.
bool w4a8_taken(const MoeConfig& c) {
  return c.weights == MoeWeights::kMxfp4 && c.mxfp4_w4a8 && c.mxfp4_tiled_order &&
         mxfp4_w4a8_z_scale(SwigluParams{c.swiglu_limit, c.swiglu_alpha}) > 0.0f;
}
bool needs_bf16_z(const MoeConfig& c) {
  return c.weights == MoeWeights::kBf16 || c.weights == MoeWeights::kMxfp4;
}

// Walks the workspace in a fixed order; with base == nullptr it only measures.
MoeBuffers carve(const MoeConfig& c, uint8_t* base, size_t* total) {
  // E: every expert (router, routing); El: the experts this rank computes (GEMM work lists, conversions).
  const size_t T = size_t(c.max_tokens), E = size_t(c.experts), K = size_t(c.top_k);
  const size_t El = size_t(c.local_experts());
  const size_t M = T * K, H = size_t(c.hidden), I = size_t(c.inter);
  const size_t Hp = size_t(round_up_128(c.hidden)), Ip = size_t(round_up_128(c.inter));
  size_t off = 0;
  auto take = [&](size_t bytes) -> void* {
    void* p = base ? base + off : nullptr;
    off = align256(off + bytes);
    return p;
  };
  MoeBuffers b;
  b.logits = static_cast<float*>(take(2 * T * E * 4));  // the split router's hi and lo rows
  b.topk_idx = static_cast<int*>(take(M * 4));
  b.topk_w = static_cast<float*>(take(M * 4));
  b.routing.offsets = static_cast<int*>(take((E + 1) * 4));
  b.routing.row_token = static_cast<int*>(take(M * 4));
  b.routing.row_expert = static_cast<int*>(take(M * 4));
  b.routing.slot_row = static_cast<int*>(take(M * 4));
  b.routing.active = static_cast<int*>(take(E * 4));
  b.routing.num_active = static_cast<int*>(take(4));
  b.permute_scratch = take(moe_permute_scratch_bytes(c.max_tokens, c.experts, c.top_k));
  if (router_route_fits(1, c.hidden, c.experts, c.top_k))
    b.route_scratch =
        take(router_route_scratch_bytes(std::min(c.max_tokens, kRouterRouteMaxItems / c.top_k), c.experts));
  if (needs_fp8_path(c)) {
    b.a_q = static_cast<uint8_t*>(take(M * Hp));
    b.a_scale = static_cast<float*>(take(M * (Hp / 128) * 4));
    b.z_q = static_cast<uint8_t*>(take(M * Ip));
    b.z_scale = static_cast<float*>(take(M * (Ip / 128) * 4));
  }
  if (c.weights == MoeWeights::kBf16) b.a_bf16 = take(M * H * 2);
  if (needs_tiled(c)) b.x_tiled = take(std::min(T, size_t(tiled_max(c))) * K * H * 2);  // permuted rows
  // The tile list: the tiled kernel's (its smallest tiles, the most of them) or, with no tiled range, the
  // W4A8 GEMM's.
  if (needs_tiled(c) || (needs_fp8_path(c) && w4a8_taken(c))) {
    const int tile_tokens = needs_tiled(c) ? kMxfp4TileTokens[0] : kMxfp4W4a8TileTokens;
    b.tiles = static_cast<int*>(take(size_t(mxfp4_tiled_max_tiles(int(M), int(El), tile_tokens)) * 8));
  }
  if (needs_bf16_z(c)) b.z_bf16 = take(M * I * 2);
  b.u = take(M * 2 * I * 2);
  b.y = take(M * H * 2);
  if (c.weights == MoeWeights::kMxfp4 && needs_fp8_path(c) && !w4a8_taken(c)) {
    b.w1_fp8 = static_cast<uint8_t*>(take(El * 2 * I * Hp));
    b.w1_fp8_scale = static_cast<float*>(take(El * ((2 * I + 127) / 128) * (Hp / 128) * 4));
    b.w2_fp8 = static_cast<uint8_t*>(take(El * H * Ip));
    b.w2_fp8_scale = static_cast<float*>(take(El * ((H + 127) / 128) * (Ip / 128) * 4));
  }
  size_t gws = 0;
  if (needs_fp8_path(c)) gws = std::max(gws, grouped_gemm_fp8_workspace_bytes(int(El)));
  if (c.weights == MoeWeights::kBf16) gws = std::max(gws, grouped_gemm_bf16_workspace_bytes(int(El)));
  b.grouped_ws = gws ? take(gws) : nullptr;
  b.grouped_ws_bytes = gws;
  *total = off;
  return b;
}

}  // namespace

// Measured (bench/RESULTS.md, 2026-12-05 fifth run, H100): the fused launch's chain takes 9.6 / 10.9 / 14.3
// / 21.5 us at 1 / 2 / 4 / 8 tokens against the three kernels' 10.2-11.2 (every warp reads all the tokens'
// norm outputs from shared memory for its expert's dot products, so it grows with the tokens), and a decode
// step at batch 1 / 2 / 4 / 8 changes by -2.9% / -0.7% / +0.5% / +3.7%.
constexpr int kNormRouteTokens = 2;

bool moe_norm_route_taken(const MoeConfig& c, int num_tokens) {
  return num_tokens <= kNormRouteTokens && norm_route_fits(num_tokens, c.hidden, c.experts, c.top_k);
}

Mxfp4Path mxfp4_path(const MoeConfig& c, int num_tokens) {
  Mxfp4Path p;
  if (num_tokens <= stream_max(c)) return p;
  if (num_tokens > tiled_max(c)) {
    p.kind = w4a8_taken(c) ? Mxfp4Path::kW4a8 : Mxfp4Path::kConvertFp8;
    return p;
  }
  p.kind = Mxfp4Path::kTiled;
  const int avg_rows = num_tokens * c.top_k / std::max(1, c.experts);
  for (const TileChoice& t : kTileTable)
    if (avg_rows <= t.max_avg_rows) {
      p.shape = t.shape;
      p.tile_tokens = t.tile_tokens;
      break;
    }
  p.down_shape = p.shape;
  if (p.tile_tokens <= kMxfp4TiledRows256MaxTokens && (c.mxfp4_down_rows == 128 || c.mxfp4_down_rows == 256))
    p.down_shape = c.mxfp4_down_rows == 128 ? Mxfp4TiledShape::kRows128 : Mxfp4TiledShape::kRows256;
  return p;
}

size_t moe_workspace_bytes(const MoeConfig& cfg) {
  size_t total = 0;
  carve(cfg, nullptr, &total);
  return total;
}

void moe_workspace_init(const MoeConfig& cfg, void* workspace, cudaStream_t stream) {
  const MoeBuffers b = moe_buffers(cfg, workspace);
  if (b.route_scratch != nullptr) router_route_scratch_init(b.route_scratch, stream);
}

namespace {
// ORCHID_ROUTER_ROUTE: 0 the router GEMM and moe_route; 1 moe_router_route; 2 also the block's input norm in
// that launch (where moe_forward has one and the fused norm kernel of 1-2 tokens is not taken). Unset: 2
// where it was measured faster, else 0. Measured (bench/RESULTS.md, 2026-12-07 twentieth run, H100): 20b
// decode steps at 16 / 64 / 128 / 256 sequences -0.8 / -1.1 / -1.0 / -0.2% against 0, +0.4% at 4; with
// 128 experts the launch is 2.3x the two-kernel chain (a slice stages four times the router rows, and
// the 8 slices of a 16-token group are too few CTAs for small batches).
constexpr int kRouterRouteMaxExperts = 32;
constexpr int kRouterRouteMinTokens = 8;
int router_route_mode(const MoeConfig& c, int num_tokens) {
  static const int forced = [] {
    const char* v = std::getenv("ORCHID_ROUTER_ROUTE");
    if (v == nullptr) return -1;
    return std::strcmp(v, "0") == 0 || std::strcmp(v, "1") == 0 || std::strcmp(v, "2") == 0 ? std::atoi(v)
                                                                                            : -1;
  }();
  if (forced >= 0) return forced;
  return c.experts <= kRouterRouteMaxExperts && num_tokens >= kRouterRouteMinTokens ? 2 : 0;
}
bool router_route_norm_taken(const MoeConfig& c, int num_tokens) {
  return router_route_mode(c, num_tokens) == 2 &&
         router_route_fits(num_tokens, c.hidden, c.experts, c.top_k, true);
}
RouterRouteArgs router_route_args(const MoeConfig& c, const MoeLayerWeights& w, const MoeBuffers& b,
                                  const void* h, int T, bool split_input) {
  RouterRouteArgs ra;
  ra.x = static_cast<const __nv_bfloat16*>(h);
  ra.split = split_input;
  ra.router_w = static_cast<const __nv_bfloat16*>(w.router_w);
  ra.router_b = w.router_b;
  ra.logits = b.logits;
  ra.topk_idx = b.topk_idx;
  ra.topk_w = b.topk_w;
  ra.routing = b.routing;
  ra.range = c.local;
  ra.scratch = b.route_scratch;
  ra.num_tokens = T;
  ra.hidden = c.hidden;
  ra.num_experts = c.experts;
  ra.top_k = c.top_k;
  return ra;
}
}  // namespace

bool moe_router_route_taken(const MoeConfig& c, int num_tokens) {
  return router_route_mode(c, num_tokens) > 0 && router_route_fits(num_tokens, c.hidden, c.experts, c.top_k);
}

MoeBuffers moe_buffers(const MoeConfig& cfg, void* workspace) {
  ORCHID_KERNEL_REQUIRE(reinterpret_cast<uintptr_t>(workspace) % 256 == 0,
                        "moe: workspace must be 256-byte aligned");
  size_t total = 0;
  return carve(cfg, static_cast<uint8_t*>(workspace), &total);
}

namespace {

// The down GEMM requests its first weights before its dependency wait (Mxfp4GemmArgs::early_weights);
// ORCHID_MOE_EARLY_WEIGHTS=0 makes it wait first, as gate_up does (the A/B).
bool moe_early_weights() {
  static const bool on = [] {
    const char* v = std::getenv("ORCHID_MOE_EARLY_WEIGHTS");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return on;
}

// The streaming GEMM skips its bias where the tensor's largest scale allows (Mxfp4GemmArgs::scale_max);
// ORCHID_MXFP4_SCALE_MAX=0 makes it reduce one from the scales as before (the A/B).
bool moe_scale_max_used() {
  static const bool on = [] {
    const char* v = std::getenv("ORCHID_MXFP4_SCALE_MAX");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return on;
}

// The block's input norm (moe_forward's in_norm): with the router and the routing in one launch where
// moe_norm_route_taken (returns true: routed), else the norm kernel alone.
bool input_norm(const MoeConfig& c, const MoeLayerWeights& w, const MoeInputNorm& in, const void* h, int T,
                bool split_input, const MoeBuffers& b, cudaStream_t stream) {
  ORCHID_KERNEL_REQUIRE(in.out == h && in.residual && in.delta && in.gamma,
                        "moe_forward: in_norm writes h from a residual, a delta and a gamma");
  auto* out = static_cast<__nv_bfloat16*>(in.out);
  const auto* delta = static_cast<const __nv_bfloat16*>(in.delta);
  const int H = c.hidden;
  if (!moe_norm_route_taken(c, T) && router_route_norm_taken(c, T)) {  // the norm, router and routing
    RouterRouteArgs ra = router_route_args(c, w, b, h, T, split_input);
    ra.x = nullptr;
    ra.residual = in.residual;
    ra.delta = delta;
    ra.gamma = in.gamma;
    ra.eps = in.eps;
    ra.out = out;
    moe_router_route(ra, stream);
    return true;
  }
  if (!moe_norm_route_taken(c, T)) {
    if (split_input)
      norm::rmsnorm_residual_split(in.residual, delta, in.gamma, out, out + size_t(T) * H, T, H, in.eps,
                                   stream);
    else
      norm::rmsnorm_residual(in.residual, delta, in.gamma, out, T, H, in.eps, stream);
    return false;
  }
  NormRouteArgs n;
  n.residual = in.residual;
  n.delta = delta;
  n.gamma = in.gamma;
  n.eps = in.eps;
  n.out = out;
  n.router_w = static_cast<const __nv_bfloat16*>(w.router_w);
  n.router_b = w.router_b;
  n.precise = split_input;
  n.logits = b.logits;
  n.topk_idx = b.topk_idx;
  n.topk_w = b.topk_w;
  n.routing = b.routing;
  n.range = c.local;
  n.num_tokens = T;
  n.hidden = H;
  n.num_experts = c.experts;
  n.top_k = c.top_k;
  moe_norm_route(n, stream);
  return true;
}

}  // namespace

void moe_forward(const MoeConfig& c, const MoeLayerWeights& w, const void* h, float* x, int num_tokens,
                 DenseGemm& router_gemm, void* workspace, cudaStream_t stream, bool split_input,
                 MoeOutput output, const MoeNextNorm* next_norm, const MoeInputNorm* in_norm) {
  ORCHID_KERNEL_REQUIRE(num_tokens >= 1 && num_tokens <= c.max_tokens,
                        "moe_forward: num_tokens out of range");
  ORCHID_KERNEL_REQUIRE(w.router_w && w.router_b && w.w1 && w.w2 && w.b1 && w.b2 && h && x,
                        "moe_forward: null pointer");
  const MoeBuffers b = moe_buffers(c, workspace);
  // E: the experts this rank computes (the router still scores all of them).
  const int T = num_tokens, E = c.local_experts(), K = c.top_k, H = c.hidden, I = c.inter;
  const int M = T * K, Hp = round_up_128(H), Ip = round_up_128(I);
  const SwigluParams sp{c.swiglu_limit, c.swiglu_alpha};

  DenseGemmArgs r;
  r.m = T;
  r.n = c.experts;
  r.k = H;
  r.x = h;
  r.w = w.router_w;
  r.bias = w.router_b;
  r.y = b.logits;
  r.out = GemmOut::kF32;
  const Mxfp4Path path = c.weights == MoeWeights::kMxfp4 ? mxfp4_path(c, T) : Mxfp4Path{};
  const bool mxfp4_stream = c.weights == MoeWeights::kMxfp4 && path.kind == Mxfp4Path::kStream;
  const bool routed = in_norm != nullptr && input_norm(c, w, *in_norm, h, T, split_input, b, stream);
  if (!routed && moe_router_route_taken(c, T)) {
    moe_router_route(router_route_args(c, w, b, h, T, split_input), stream);
  } else if (!routed) {
    if (split_input) {  // one GEMM over the hi and lo rows, no bias; moe_route adds the halves and the bias
      r.m = 2 * T;
      r.bias = nullptr;
      router_gemm.run(r, stream);
      moe_route(b.logits, T, c.experts, K, b.topk_idx, b.topk_w, b.routing, b.permute_scratch, stream,
                b.logits + size_t(T) * c.experts, w.router_b, c.local);
    } else {
      router_gemm.run(r, stream);
      moe_route(b.logits, T, c.experts, K, b.topk_idx, b.topk_w, b.routing, b.permute_scratch, stream,
                nullptr, nullptr, c.local);
    }
  }

  if (c.weights == MoeWeights::kBf16) {
    moe_gather_bf16(h, b.routing.row_token, M, H, b.a_bf16, stream);
    GroupedGemmArgs g;
    g.num_groups = E;
    g.offsets = b.routing.offsets;
    g.workspace = b.grouped_ws;
    g.workspace_bytes = b.grouped_ws_bytes;
    g.n = 2 * I;
    g.k = H;
    g.a = b.a_bf16;
    g.b = w.w1;
    g.d = b.u;
    grouped_gemm_bf16(g, stream);
    moe_swiglu_bf16(b.u, w.b1, b.routing.row_expert, M, I, sp, b.z_bf16, stream);
    g.n = H;
    g.k = I;
    g.a = b.z_bf16;
    g.b = w.w2;
    g.d = b.y;
    grouped_gemm_bf16(g, stream);
  } else if (c.weights == MoeWeights::kMxfp4 && path.kind == Mxfp4Path::kTiled) {
    ORCHID_KERNEL_REQUIRE(b.tiles != nullptr, "moe_forward: workspace sized without the MXFP4 tiled path");
    Mxfp4TiledArgs g;
    g.num_experts = E;
    g.cta_shape = path.shape;
    g.tile_tokens = path.tile_tokens;
    g.offsets = b.routing.offsets;
    g.tiles = b.tiles;
    g.max_tiles = mxfp4_tiled_max_tiles(M, E, path.tile_tokens);
    // The work list (both GEMMs), and the permuted rows gathered once (the hi rows of a split input) so
    // that the GEMM copies a tile's token rows as tensor boxes: one launch.
    mxfp4_tiled_prepare(h, M, H, b.x_tiled, b.routing.row_token, b.routing.offsets, E, g.tile_tokens, b.tiles,
                        g.max_tiles, stream);
    g.n = 2 * I;
    g.k = H;
    g.blocks = static_cast<const uint8_t*>(w.w1);
    g.scales = static_cast<const uint8_t*>(w.w1_scale);
    g.x = b.x_tiled;
    g.x_row_count = M;
    g.tiled_order = c.mxfp4_tiled_order;
    g.y = b.z_bf16;  // z in the tiled order: the down GEMM's input as is
    g.swiglu_bias = w.b1;
    g.swiglu = sp;
    mxfp4_tiled_gemm(g, stream);
    g.swiglu_bias = nullptr;
    g.n = H;
    g.k = I;
    g.blocks = static_cast<const uint8_t*>(w.w2);
    g.scales = static_cast<const uint8_t*>(w.w2_scale);
    g.x = b.z_bf16;
    g.y = b.y;
    g.cta_shape = path.down_shape;
    g.early_weights = moe_early_weights();
    mxfp4_tiled_gemm(g, stream);
  } else if (c.weights == MoeWeights::kMxfp4 && path.kind == Mxfp4Path::kW4a8) {
    ORCHID_KERNEL_REQUIRE(b.tiles != nullptr && b.a_q != nullptr,
                          "moe_forward: workspace sized without the MXFP4 W4A8 path");
    Mxfp4W4a8Args g;
    g.num_experts = E;
    g.offsets = b.routing.offsets;
    g.tiles = b.tiles;
    g.max_tiles = mxfp4_tiled_max_tiles(M, E, kMxfp4W4a8TileTokens);
    g.max_ctas = c.mxfp4_w4a8_ctas;
    mxfp4_tiled_plan(b.routing.offsets, E, kMxfp4W4a8TileTokens, b.tiles, g.max_tiles, stream);
    // The permuted rows (the hi rows of a split input), e4m3 with a scale a row.
    mxfp4_w4a8_activation(h, M, H, b.a_q, b.a_scale, stream, b.routing.row_token);
    g.n = 2 * I;
    g.k = H;
    g.blocks = static_cast<const uint8_t*>(w.w1);
    g.scales = static_cast<const uint8_t*>(w.w1_scale);
    g.x = b.a_q;
    g.x_row_count = M;
    g.x_scale = b.a_scale;
    g.y = b.z_q;  // z as e4m3 with the fixed scale, W4A8 order: the down GEMM's input as is
    g.swiglu_bias = w.b1;
    g.swiglu = sp;
    g.z_scale = mxfp4_w4a8_z_scale(sp);
    mxfp4_w4a8_gemm(g, stream);
    g.swiglu_bias = nullptr;
    g.n = H;
    g.k = I;
    g.blocks = static_cast<const uint8_t*>(w.w2);
    g.scales = static_cast<const uint8_t*>(w.w2_scale);
    g.x = b.z_q;
    g.x_scale = nullptr;
    g.x_scale_all = g.z_scale;
    g.y = b.y;
    mxfp4_w4a8_gemm(g, stream);
  } else if (mxfp4_stream) {
    Mxfp4GemmArgs g;
    g.num_experts = E;
    g.offsets = b.routing.offsets;
    g.active = b.routing.active;
    g.num_active = b.routing.num_active;
    g.max_active = std::min(E, M);
    g.max_rows_per_expert = T;
    g.tiled_order = c.mxfp4_tiled_order;
    g.n = 2 * I;
    g.k = H;
    g.blocks = static_cast<const uint8_t*>(w.w1);
    g.scales = static_cast<const uint8_t*>(w.w1_scale);
    g.scale_max = moe_scale_max_used() ? w.w1_scale_max : nullptr;
    g.x = h;
    g.x_rows = b.routing.row_token;
    g.y = b.z_bf16;  // bias + SwiGLU fused into the epilogue: u never goes to memory
    g.swiglu_bias = w.b1;
    g.swiglu = sp;
    mxfp4_moe_gemm(g, stream);
    g.swiglu_bias = nullptr;
    g.n = H;
    g.k = I;
    g.blocks = static_cast<const uint8_t*>(w.w2);
    g.scales = static_cast<const uint8_t*>(w.w2_scale);
    g.scale_max = moe_scale_max_used() ? w.w2_scale_max : nullptr;
    g.x = b.z_bf16;
    g.x_rows = nullptr;
    g.y = b.y;
    g.early_weights = moe_early_weights();
    mxfp4_moe_gemm(g, stream);
  } else {
    ORCHID_KERNEL_REQUIRE(b.a_q != nullptr, "moe_forward: workspace sized for fewer tokens (max_tokens)");
    const void *w1 = w.w1, *w1s = w.w1_scale, *w2 = w.w2, *w2s = w.w2_scale;
    if (c.weights == MoeWeights::kMxfp4) {
      // Only experts that received rows are converted (offsets are read on the device).
      mxfp4_to_fp8_block(static_cast<const uint8_t*>(w.w1), static_cast<const uint8_t*>(w.w1_scale), E, 2 * I,
                         H, Fp8ScaleRule::kPow2, b.w1_fp8, b.w1_fp8_scale, b.routing.offsets, stream,
                         c.mxfp4_tiled_order);
      mxfp4_to_fp8_block(static_cast<const uint8_t*>(w.w2), static_cast<const uint8_t*>(w.w2_scale), E, H, I,
                         Fp8ScaleRule::kPow2, b.w2_fp8, b.w2_fp8_scale, b.routing.offsets, stream,
                         c.mxfp4_tiled_order);
      w1 = b.w1_fp8;
      w1s = b.w1_fp8_scale;
      w2 = b.w2_fp8;
      w2s = b.w2_fp8_scale;
    }
    moe_gather_quant_fp8(h, b.routing.row_token, M, H, b.a_q, b.a_scale, stream);
    GroupedGemmArgs g;
    g.num_groups = E;
    g.offsets = b.routing.offsets;
    g.workspace = b.grouped_ws;
    g.workspace_bytes = b.grouped_ws_bytes;
    g.n = 2 * I;
    g.k = Hp;
    g.a = b.a_q;
    g.a_scale = b.a_scale;
    g.b = w1;
    g.b_scale = static_cast<const float*>(w1s);
    g.d = b.u;
    grouped_gemm_fp8_blockwise(g, stream, c.fp8_config);
    moe_swiglu_fp8(b.u, w.b1, b.routing.row_expert, M, I, sp, b.z_q, b.z_scale, stream);
    g.n = H;
    g.k = Ip;
    g.a = b.z_q;
    g.a_scale = b.z_scale;
    g.b = w2;
    g.b_scale = static_cast<const float*>(w2s);
    g.d = b.y;
    grouped_gemm_fp8_blockwise(g, stream, c.fp8_config);
  }
  if (next_norm != nullptr) {
    ORCHID_KERNEL_REQUIRE(output == MoeOutput::kAddToResidual && c.local.begin == 0,
                          "moe_forward: the next layer's norm goes with a combine into the residual stream");
    moe_combine_norm(b.y, w.b2, b.topk_idx, b.topk_w, b.routing.slot_row, T, K, H, x, next_norm->gamma,
                     next_norm->eps, next_norm->out, stream);
  } else {
    moe_combine(b.y, w.b2, b.topk_idx, b.topk_w, b.routing.slot_row, T, K, H, x, stream, c.local.begin,
                output == MoeOutput::kStorePart);
  }
}

}  // namespace orchid::kernels
