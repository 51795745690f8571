// Prefill sink attention, FA2-style (mma.sync m16n8k16 bf16, ldmatrix, cp.async), over the paged KV cache.
//
// Tiling. A CTA (4 warps) owns 128 query rows = tokens_per_tile (128 / G) consecutive tokens x the G query
// heads of one KV head, row r = (token r / G, head r % G): every K/V tile it loads serves all G heads, the
// causal diagonal of a tile spans only 128 / G positions (16 for gpt-oss), and a short prefill chunk or a
// 128-key sliding window wastes few rows. Each warp owns 32 rows (two m16 tiles) so every K/V fragment read
// from shared memory feeds two MMAs (shared-memory bandwidth is the limit of mma.sync on Hopper with d = 64).
// K and V tiles of 64 keys go through a 3-stage cp.async ring; Q fragments stay in registers.
// Key tiles are visited from the last (diagonal, masked) to the first; only tiles that cross the diagonal or
// the window's lower edge apply the per-element mask. Rows of K/V outside [kv_begin, kv_end) of the CTA, and
// rows in pages marked kNoPage, are zero-filled instead of read, so stale or poisoned cache memory can never
// reach the accumulators (a NaN in V times P = 0 would).
//
// Softmax in the log2 domain: x = s * scale * log2(e); the running max starts at the sink (sink * log2(e))
// and the running sum at exp2(sink - m) = 1, so the sink is counted exactly once and no row ever has an
// infinite max. The row sum is kept per thread (only lane 4k holds the sink's 1) and reduced over the quad at
// the end.
//
// Napkin math (gpt-oss-20b, one full layer, causal 32k tokens): 4 * 64 * 32768^2 / 2 * 64 heads = 8.8e12
// FLOP; at 350 TFLOP/s 25 ms per layer (12 layers: 0.30 s). K/V traffic from L2: each CTA reads K and V up to
// its diagonal, 2048 CTAs x 8 heads x (16 KB x 256 tiles on average) = 69 GB from L2 per layer, well under L2
// bandwidth at that time; from HBM the cache of a layer (32768 x 2 KB = 64 MB) is read about once.
// Shared memory per CTA: Q 16 KB + 3 x (8 + 8) KB = 64 KB, two CTAs per SM.
//
// FP8 KV cache (kFp8): the ring holds e4m3 tiles (64-byte rows, swz8); once a tile has landed the CTA widens
// it to f16 (one cvt per two elements) into one swizzled f16 K and V tile, a barrier later the warps compute
// on it with f16 MMAs, Q's fragments rounded to f16 once (exact for bf16 values of normal f16 range). A
// second barrier a tile and ~44 instructions a thread against the tile's ~460: the FP8 cache's point is
// decode at long context, not prefill speed. Q 16 KB + 3 x (4 + 4) KB + 16 KB = 56 KB.
#include "kernels/attention/kv_layout.h"
#include "kernels/attention/paged_kv.cuh"
#include "kernels/attention/prefill_params.h"
#include "kernels/attention/sink_attention.h"
#include "kernels/attention/warp_mma.cuh"
#include "kernels/common/smem_attribute.h"

#include "kernels/common/cuda_check.h"

#include <type_traits>

namespace orchid::kernels::attention {
namespace {

using namespace detail;

constexpr int kBlockM = kPrefillBlockM;  // query rows per CTA
constexpr int kBlockN = 64;              // keys per tile
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kStages = 3;
constexpr int kWideTileBytes = kBlockN * kHeadDim * 2;  // a bf16 or f16 tile
constexpr int kQBytes = kBlockM * kHeadDim * 2;
template <bool kFp8>
struct PrefillSmem {
  static constexpr int kTileBytes = kBlockN * kHeadDim * (kFp8 ? 1 : 2);  // a ring stage's K (or V) tile
  static constexpr int kBytes = kQBytes + 2 * kStages * kTileBytes + (kFp8 ? 2 * kWideTileBytes : 0);
};
constexpr float kLog2e = 1.4426950408889634f;
static_assert(kBlockM == kWarps * 32, "each warp owns 32 rows");
template <bool kFp8>
__global__ void __launch_bounds__(kThreads, 2) prefill_kernel(const __grid_constant__ PrefillParams p) {
  constexpr int kTileBytes = PrefillSmem<kFp8>::kTileBytes;
  constexpr int kElemBytes = kFp8 ? 1 : 2;
  extern __shared__ __align__(128) uint8_t smem[];
  const uint32_t sQ = smem_addr(smem);
  const uint32_t sK = sQ + kQBytes;
  const uint32_t sV = sK + kStages * kTileBytes;
  const uint32_t sKw = sV + kStages * kTileBytes;  // kFp8: the f16 tiles the warps compute on
  const uint32_t sVw = sKw + kWideTileBytes;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

  const int kvh = blockIdx.x % p.num_kv_heads;
  const PrefillTile tile = p.tiles[blockIdx.x / p.num_kv_heads];
  const AttnSeq seq = p.seqs[tile.seq];
  const int G = p.group;
  const int n_tok = min(p.tokens_per_tile, seq.num_q - tile.q0);
  const int rows_valid = n_tok * G;
  const int p_first = seq.start_pos + tile.q0;
  const int p_last = p_first + n_tok - 1;
  const int kv_begin = p.window > 0 ? max(0, p_first - p.window + 1) : 0;
  const int kv_end = p_last + 1;
  const int j_first = kv_begin / kBlockN;
  const int j_last = (kv_end - 1) / kBlockN;
  const int n_tiles = j_last - j_first + 1;
  const PagedKv kv =
      PagedKv::of(p.seqs, tile.seq, p.page_table, p.table_kind, p.page_size_log2, p.num_kv_heads, kvh);
  const size_t tok0 = size_t(seq.q_start) + size_t(tile.q0);
  const int hq = p.num_q_heads;
  // K's scale multiplies every score of the CTA's KV head, V's its output (FP8 pools; 1 otherwise).
  const float scale_log2 = p.k_scale != nullptr ? p.scale_log2 * p.k_scale[kvh] : p.scale_log2;
  const float v_scale = p.v_scale != nullptr ? p.v_scale[kvh] : 1.0f;

  // Q tile: 128 rows x 8 chunks, 8 per thread; rows past the tile's tokens are zero.
  load_q_rows<kBlockM, kThreads>(sQ, p.q, tok0, hq, kvh * G, G, rows_valid, tid);
  cp_async_commit();

  auto load_kv = [&](int j, int stage) {
    load_kv_tile<kElemBytes, kThreads>(sK + stage * kTileBytes, sV + stage * kTileBytes, p.k_pool, p.v_pool,
                                       kv, j, kv_begin, kv_end, tid);
  };

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < n_tiles) load_kv(j_last - s, s);
    cp_async_commit();
  }

  // Per-row constants: the rows this thread holds are (mi, h): warp*32 + mi*16 + h*8 + lane/4.
  int row_pos[2][2], row_lo[2][2];
  float m_run[2][2], l_run[2][2];
#pragma unroll
  for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = warp * 32 + mi * 16 + h * 8 + (lane >> 2);
      const int tok = min(r / G, n_tok - 1);  // padding rows borrow the last token's mask
      const int pos = p_first + tok;
      row_pos[mi][h] = pos;
      row_lo[mi][h] = p.window > 0 ? pos - p.window + 1 : 0;
      const int head = kvh * G + (r % G);
      if (p.sinks != nullptr) {
        m_run[mi][h] = p.sinks[head] * kLog2e;
        l_run[mi][h] = (lane & 3) == 0 ? 1.0f : 0.0f;  // exp2(sink - m) = 1, held once per quad
      } else {
        m_run[mi][h] = -INFINITY;
        l_run[mi][h] = 0.0f;
      }
    }
  }
  float o[2][8][4];
#pragma unroll
  for (int mi = 0; mi < 2; ++mi)
#pragma unroll
    for (int dt = 0; dt < 8; ++dt)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[mi][dt][e] = 0.0f;

  // Q fragments (A operand), once.
  cp_async_wait<kStages - 1>();
  __syncthreads();
  uint32_t qf[2][4][4];
#pragma unroll
  for (int mi = 0; mi < 2; ++mi)
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
      const int r = warp * 32 + mi * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
      ldmatrix_x4(sQ + swz(r, ks * 2 + (lane >> 4)), qf[mi][ks]);
      if constexpr (kFp8)
#pragma unroll
        for (int e = 0; e < 4; ++e) qf[mi][ks][e] = bf16x2_to_f16x2(qf[mi][ks][e]);
    }

  for (int it = 0; it < n_tiles; ++it) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // tile `it` visible to all; everyone is done with the stage refilled below
    {
      const int nx = it + kStages - 1;
      if (nx < n_tiles) load_kv(j_last - nx, nx % kStages);
      cp_async_commit();
    }
    const int j = j_last - it;
    uint32_t kb = sK + (it % kStages) * kTileBytes;
    uint32_t vb = sV + (it % kStages) * kTileBytes;
    if constexpr (kFp8) {
      // The whole tile widened to f16 by the CTA; the barrier above also ended every warp's reads of the f16
      // tiles for the previous key tile.
      widen_e4m3_rows<kBlockN, kThreads>(kb, sKw, 0, tid);
      widen_e4m3_rows<kBlockN, kThreads>(vb, sVw, 0, tid);
      __syncthreads();
      kb = sKw, vb = sVw;
    }

    // S = Q K^T for 32 rows x 64 keys per warp.
    float s[2][8][4];
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
      for (int nt = 0; nt < 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[mi][nt][e] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
#pragma unroll
      for (int np = 0; np < 4; ++np) {
        uint32_t b[4];
        ldmatrix_x4(kb + swz(np * 16 + (lane & 7) + (lane >> 4) * 8, ks * 2 + ((lane >> 3) & 1)), b);
#pragma unroll
        for (int mi = 0; mi < 2; ++mi) {
          mma_16816<kFp8>(s[mi][2 * np], qf[mi][ks], b[0], b[1]);
          mma_16816<kFp8>(s[mi][2 * np + 1], qf[mi][ks], b[2], b[3]);
        }
      }
    }

    const int k0 = j * kBlockN;
    const bool need_mask = (k0 + kBlockN - 1 > p_first) || (p.window > 0 && k0 < p_last - p.window + 1);
    if (need_mask) {
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int nt = 0; nt < 8; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int t = k0 + nt * 8 + 2 * (lane & 3) + (e & 1);
            const int h = e >> 1;
            if (t > row_pos[mi][h] || t < row_lo[mi][h]) s[mi][nt][e] = -INFINITY;
          }
    }

    // Online softmax (log2 domain).
#pragma unroll
    for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float mx = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) mx = fmaxf(mx, fmaxf(s[mi][nt][2 * h], s[mi][nt][2 * h + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float m_new = fmaxf(m_run[mi][h], mx * scale_log2);
        const float m_use = m_new == -INFINITY ? 0.0f : m_new;
        const float alpha = fast_exp2(m_run[mi][h] - m_use);
        m_run[mi][h] = m_new;
        float rs = 0.0f;
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
          for (int e = 2 * h; e < 2 * h + 2; ++e) {
            const float pv = fast_exp2(fmaf(s[mi][nt][e], scale_log2, -m_use));
            s[mi][nt][e] = pv;
            rs += pv;
          }
        }
        l_run[mi][h] = l_run[mi][h] * alpha + rs;
#pragma unroll
        for (int dt = 0; dt < 8; ++dt) {
          o[mi][dt][2 * h] *= alpha;
          o[mi][dt][2 * h + 1] *= alpha;
        }
      }
    }

    // O += P V: P (C layout of two n8 tiles) is the A operand of one k16 step.
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      uint32_t pa[2][4];
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
        pa[mi][0] = pack_16<kFp8>(s[mi][2 * kk][0], s[mi][2 * kk][1]);
        pa[mi][1] = pack_16<kFp8>(s[mi][2 * kk][2], s[mi][2 * kk][3]);
        pa[mi][2] = pack_16<kFp8>(s[mi][2 * kk + 1][0], s[mi][2 * kk + 1][1]);
        pa[mi][3] = pack_16<kFp8>(s[mi][2 * kk + 1][2], s[mi][2 * kk + 1][3]);
      }
#pragma unroll
      for (int dp = 0; dp < 4; ++dp) {
        uint32_t b[4];
        ldmatrix_x4_trans(vb + swz(kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, dp * 2 + (lane >> 4)), b);
#pragma unroll
        for (int mi = 0; mi < 2; ++mi) {
          mma_16816<kFp8>(o[mi][2 * dp], pa[mi], b[0], b[1]);
          mma_16816<kFp8>(o[mi][2 * dp + 1], pa[mi], b[2], b[3]);
        }
      }
    }
  }
  cp_async_wait<0>();

  // Normalise, stage the warp's own 32 rows in its part of the Q buffer (no other warp reads it), then
  // write 16-byte chunks of whole rows.
#pragma unroll
  for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float l = l_run[mi][h];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const float inv = l > 0.0f ? v_scale / l : 0.0f;
      const int r = warp * 32 + mi * 16 + h * 8 + (lane >> 2);
#pragma unroll
      for (int dt = 0; dt < 8; ++dt) {
        *reinterpret_cast<uint32_t*>(smem + swz(r, dt) + (lane & 3) * 4) =
            pack_bf16(o[mi][dt][2 * h] * inv, o[mi][dt][2 * h + 1] * inv);
      }
    }
  }
  __syncwarp();
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int r = warp * 32 + i * 4 + (lane >> 3);
    const int chunk = lane & 7;
    if (r < rows_valid) {
      const int tok = r / G;
      const uint4 v = *reinterpret_cast<const uint4*>(smem + swz(r, chunk));
      *reinterpret_cast<uint4*>(p.out + ((tok0 + tok) * hq + kvh * G + (r - tok * G)) * kHeadDim +
                                chunk * 8) = v;
    }
  }
}

}  // namespace

void sink_attention_prefill(const SinkAttentionArgs& a, const AttentionPlan& plan, void* workspace,
                            cudaStream_t stream) {
  if (plan.num_prefill_tiles == 0) return;
  const int log2_page = log2_exact(a.page_size);
  ORCHID_KERNEL_REQUIRE(log2_page >= 0, "sink_attention: page_size must be a power of two");
  ORCHID_KERNEL_REQUIRE(plan.num_kv_heads > 0 && plan.num_q_heads % plan.num_kv_heads == 0,
                        "sink_attention: bad head counts in the plan");
  const int group = plan.num_q_heads / plan.num_kv_heads;
  const bool hopper = a.prefill_variant == PrefillVariant::kHopper;
  ORCHID_KERNEL_REQUIRE(
      group <= kBlockM && (hopper ? hopper_prefill_consumers(group, plan.prefill_tokens_per_tile) != 0
                                  : plan.prefill_tokens_per_tile == kBlockM / group),
      "sink_attention: plan built for another prefill tile shape");
  ORCHID_KERNEL_REQUIRE(!hopper || (log2_page >= 3 && a.num_pages > 0),
                        "sink_attention: the Hopper prefill kernel needs pages of >= 8 tokens and num_pages");
  ORCHID_KERNEL_REQUIRE(
      !hopper || !a.kv_fp8,
      "sink_attention: the Hopper prefill kernel reads BF16 pages; FP8 ones take the mma.sync "
      "kernel");
  ORCHID_KERNEL_REQUIRE(a.window >= 0, "sink_attention: negative window");
  auto aligned = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; };
  ORCHID_KERNEL_REQUIRE(aligned(a.q) && aligned(a.k_pool) && aligned(a.v_pool) && aligned(a.out),
                        "sink_attention: q, pools and out must be 16-byte aligned");
  PrefillParams p;
  p.q = a.q;
  p.k_pool = a.k_pool;
  p.v_pool = a.v_pool;
  p.k_scale = a.kv_fp8 ? a.k_scale : nullptr;
  p.v_scale = a.kv_fp8 ? a.v_scale : nullptr;
  p.page_table = a.page_table;
  p.sinks = a.sinks;
  p.out = a.out;
  p.seqs = plan.seqs;
  p.tiles = plan.prefill_tiles;
  p.table_kind = int(a.table_kind);
  p.num_q_heads = plan.num_q_heads;
  p.num_kv_heads = plan.num_kv_heads;
  p.group = group;
  p.tokens_per_tile = plan.prefill_tokens_per_tile;
  p.page_size_log2 = log2_page;
  p.window = a.window;
  p.scale_log2 = a.softmax_scale * kLog2e;
  p.kv_heads = FastDivmod(uint32_t(plan.num_kv_heads));
  const long long blocks = (long long)plan.num_prefill_tiles * plan.num_kv_heads;
  ORCHID_KERNEL_REQUIRE(blocks < (1ll << 31), "sink_attention: too many prefill tiles");
  if (hopper) {
    ORCHID_KERNEL_REQUIRE(a.num_pages * plan.num_kv_heads * a.page_size < (int64_t(1) << 31),
                          "sink_attention: pools too large for 32-bit TMA row coordinates");
    ORCHID_KERNEL_REQUIRE(a.prefill_ctas >= 0, "sink_attention: negative prefill_ctas");
    // Split keys apply to full attention (a window's items are short); the sliding launches take the tiles.
    const bool split = a.window == 0 && plan.num_split_tiles > 0;
    long long items = blocks;
    if (split) {
      ORCHID_KERNEL_REQUIRE(workspace != nullptr && (reinterpret_cast<uintptr_t>(workspace) & 15) == 0,
                            "sink_attention: a plan with split prefill tiles needs its 16-byte aligned "
                            "workspace (AttentionPlanBuilder::workspace_bytes)");
      p.pieces = plan.prefill_pieces;
      p.partial = static_cast<float*>(workspace);
      items = (long long)plan.num_prefill_pieces * plan.num_kv_heads;
      ORCHID_KERNEL_REQUIRE(items < (1ll << 31), "sink_attention: too many prefill pieces");
    }
    launch_prefill_hopper(p, plan.num_tokens, a.num_pages, unsigned(items), a.prefill_ctas,
                          a.prefill_tma_store, stream);
    if (split) launch_prefill_merge(p, plan.split_tiles, plan.num_split_tiles, stream);
    return;
  }
  auto launch = [&](auto fp8) {
    constexpr bool kFp8 = decltype(fp8)::value;
    constexpr int bytes = PrefillSmem<kFp8>::kBytes;
    ensure_dynamic_smem<PrefillSmem<kFp8>>(prefill_kernel<kFp8>, bytes);
    prefill_kernel<kFp8><<<unsigned(blocks), kThreads, bytes, stream>>>(p);
    ORCHID_CUDA_CHECK_LAUNCH();
  };
  if (a.kv_fp8)
    launch(std::true_type{});
  else
    launch(std::false_type{});
}

}  // namespace orchid::kernels::attention
