// Decode sink attention over the paged KV cache, split-KV, mma.sync: sequences with a few query tokens
// (one for a plain decode, 1 + k for a speculative verify step, causal among themselves).
//
// Grid (split, KV head, decode slot); a CTA of 4 warps serves the n x G query rows of one KV head (row
// r = token r / G, head r % G), padded to m16 tiles (kMTiles = ceil(decode_q * G / 16): gpt-oss's 8 heads
// use half of one tile for one token; the waste is free since decode is bound by reading K/V, and the K/V
// tiles are read once for all n tokens). The keys [first query's window start, last query] are cut in
// 64-key tiles, streamed through a 4-stage cp.async ring; warp w takes keys 16w..16w+15 of every tile and
// keeps its own online softmax (m, l, O) per row, each row masked to its own causal / window range, and the
// four warps are combined through shared memory at the end.
// Splits: the key tiles are shared out, ceil(tiles / splits) per split; a split with no keys, or a row with
// none of its keys in the split, writes lse = -inf. With one split the CTA adds the sink and writes bf16
// output directly; otherwise it writes its normalised partial O and its log2-sum-exp, and
// decode_merge_kernel adds exp2(sink) once, weights the splits and writes the output. (Merging in the last
// split CTA to finish instead was measured and removed: +4% on a one-token step.) Sequence lengths are
// read on the device and the grid depends only on (decode_bucket, Hkv, decode_splits) and the plan's
// decode_q: graph-capturable.
//
// Napkin math (batch 1, gpt-oss-20b full layer, 32k context): K+V = 32768 x 8 heads x 256 B = 67 MB,
// 16 us at 4.17 TB/s; FLOPs (2 x 2 x 64 x 64 heads x 32768 = 0.5 GFLOP) are irrelevant. Splits are chosen so
// that about two CTAs per SM stream K/V (plan: splits = 2 * SMs / (bucket * Hkv), >= 2 tiles per split).
//
// FP8 KV cache (kFp8): the ring holds e4m3 tiles (64-byte rows, swz8), for a plain decode two 64-key tiles
// a stage in 3 stages (kSub; else one in 6: 48 KB either way, 50 KB a CTA with the Q tile, four CTAs an SM
// with one m16 tile), and each warp reads its MMA fragments straight from them
// (warp_mma.cuh's k_frags_e4m3 / v_frags_e4m3: 16-byte reads of K rows and 8-byte reads of V rows, widened to
// f16 in registers; head dims permuted alike in Q and K, output dims permuted in V and undone in the
// combine), the queries rounded to f16 once, in shared memory. Half the bytes a key: the point at long
// context. An earlier version widened every tile into f16 tiles in shared memory first and ran at 56% of HBM
// against BF16's 82% (H200, B = 64 ctx 32768, bench/RESULTS.md 2026-12-05): that pass and the occupancy its
// tiles cost (three CTAs an SM, so 512 CTAs took two waves) were the suspects.
#include <cstdlib>
#include <cstring>

#include "kernels/attention/kv_layout.h"
#include "kernels/attention/paged_kv.cuh"
#include "kernels/attention/sink_attention.h"
#include "kernels/attention/warp_mma.cuh"
#include "kernels/common/smem_attribute.h"

#include "kernels/common/cuda_check.h"
#include "kernels/common/device_info.h"
#include "kernels/common/pdl.cuh"

namespace orchid::kernels::attention {
namespace {

using namespace detail;

constexpr int kBlockN = 64;
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kComboStride = kHeadDim + 8;  // fp32 row stride of the warp-combine buffer (fewer conflicts)
constexpr float kLog2e = 1.4426950408889634f;

// The K/V ring of a KV-cache precision and depth: BF16 tiles of 128-byte rows in 4 stages (64 KB: three CTAs
// an SM with one m16 tile) or 3 (48 KB: four), or e4m3 tiles of 64-byte rows in 6 (48 KB; the MMAs read
// their fragments straight from them, so the ring and Q's tile are all the shared memory there is). The
// launcher takes the shallower BF16 ring when the grid is more than one wave of the deeper one's CTAs
// (decode_stages).
// A stage holds kSub consecutive 64-key tiles of K (and of V), which one iteration of the loop takes: each
// warp then computes 16 keys of each, two independent chains of MMAs and loads to interleave where one
// alone leaves the warp waiting on latencies (e4m3 tiles: half the bytes of a BF16 tile for the same work).
template <bool kFp8, int kStagesT, int kSub = 1>
struct DecodeRing {
  static constexpr int kStages = kStagesT;
  static constexpr int kSubTileBytes = kBlockN * kHeadDim * (kFp8 ? 1 : 2);  // one 64-key tile
  static constexpr int kTileBytes = kSub * kSubTileBytes;
  static constexpr int kBytes = 2 * kStages * kTileBytes;
};

template <int kMTiles, bool kFp8, int kStages, int kSub>
struct DecodeSmem {
  static constexpr int kRows = 16 * kMTiles;
  static constexpr int kQBytes = kRows * kHeadDim * 2;
  static constexpr int kRingBytes = DecodeRing<kFp8, kStages, kSub>::kBytes;
  static constexpr int kComboBytes = kWarps * kRows * (kComboStride + 2) * 4;
  static constexpr int kBytes = kQBytes + (kRingBytes > kComboBytes ? kRingBytes : kComboBytes);
};

struct DecodeParams {
  const __nv_bfloat16* q;
  const void* k_pool;  // bf16, or e4m3 (kFp8)
  const void* v_pool;
  const float* k_scale;  // [Hkv] or null (1.0): FP8 pools only
  const float* v_scale;
  const int32_t* page_table;
  const float* sinks;
  __nv_bfloat16* out;
  float* part_o;    // [bucket][decode_q][Hq][splits][64]
  float* part_lse;  // [bucket][decode_q][Hq][splits]
  const AttnSeq* seqs;
  const int32_t* decode_seqs;
  int table_kind;
  int num_q_heads;
  int num_kv_heads;
  int group;
  int decode_q;
  int splits;
  int page_size_log2;
  int window;
  float scale_log2;
};

// kLowRows: every query row of the CTA is among the first 8 of its one m16 tile (a plain decode with 8 query
// heads a KV head, gpt-oss's GQA): the MMAs compute the other 8 rows anyway, but their softmax (maxima,
// shuffles, exponentials, the output's rescale) is skipped and their probabilities are zero.
// One m16 tile on e4m3 tiles: registers for four CTAs an SM (the ring allows four; left alone, the
// compiler's schedule for two tiles an iteration took 148 registers, three CTAs).
template <int kMTiles, bool kFp8, int kStages, int kSub, bool kLowRows>
__global__ void __launch_bounds__(kThreads, (kFp8 && kMTiles == 1) ? 4 : 1)
    decode_kernel(const __grid_constant__ DecodeParams p) {
  static_assert(kFp8 || kSub == 1, "BF16 tiles are taken one an iteration");
  static_assert(!kLowRows || kMTiles == 1, "the low rows of one m16 tile");
  // Programmatic dependent launch (kernels/common/pdl.cuh): the plan, the page tables and every key before
  // the step's first new one were written before the previous kernel (RoPE/KV write, which lets this one
  // launch as soon as it runs), so the set-up and the leading K/V stages made only of such keys are
  // requested before the wait; the queries and any tile holding a new key come after it.
  using Smem = DecodeSmem<kMTiles, kFp8, kStages, kSub>;
  using Ring = DecodeRing<kFp8, kStages, kSub>;
  constexpr int kTileBytes = Ring::kTileBytes, kSubTileBytes = Ring::kSubTileBytes;
  constexpr int kRows = Smem::kRows;
  extern __shared__ __align__(128) uint8_t smem[];
  const uint32_t sQ = smem_addr(smem);
  const uint32_t sK = sQ + Smem::kQBytes;
  const uint32_t sV = sK + kStages * kTileBytes;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

  const int split = blockIdx.x, kvh = blockIdx.y, slot = blockIdx.z;
  const int seq_idx = p.decode_seqs[slot];
  if (seq_idx < 0) {  // padding slot of a bucket
    pdl_wait();
    return;
  }
  const AttnSeq seq = p.seqs[seq_idx];
  const int G = p.group;
  const int hq = p.num_q_heads, hkv = p.num_kv_heads;
  const int head0 = kvh * G;
  const int nq = seq.num_q;  // 1 .. decode_q
  const int rows = nq * G;   // valid rows of the CTA
  const int first = seq.start_pos, last = first + nq - 1;
  // Keys some row reads: [kv_begin, kv_end); keys every row reads: [all_begin, all_end).
  const int kv_end = last + 1;
  const int kv_begin = p.window > 0 ? max(0, first - p.window + 1) : 0;
  const int all_begin = p.window > 0 ? max(0, last - p.window + 1) : 0;
  const int all_end = first + 1;
  const int tb = kv_begin / kBlockN, te = (kv_end + kBlockN - 1) / kBlockN;
  const int per = (te - tb + p.splits - 1) / p.splits;
  const int my_tb = tb + split * per;
  const int my_te = min(te, my_tb + per);
  // Partial-result row of CTA row r (token t, head g): ((slot * decode_q + t) * Hq + head0 + g) * splits.
  auto part_row = [&](int r) {
    const int t = r / G;
    return ((size_t(slot) * p.decode_q + t) * hq + head0 + (r - t * G)) * p.splits + split;
  };
  if (my_tb >= my_te) {  // empty split (only when splits > 1): weight zero in the merge
    pdl_wait();
    for (int r = tid; r < rows; r += kThreads) p.part_lse[part_row(r)] = -INFINITY;
    return;
  }
  const int n_tiles = my_te - my_tb;
  const int n_iters = (n_tiles + kSub - 1) / kSub;  // the last one's sub-tiles past my_te: zeros, masked
  const PagedKv kv = PagedKv::of(p.seqs, seq_idx, p.page_table, p.table_kind, p.page_size_log2, hkv, kvh);
  // K's scale multiplies every score of the CTA's KV head, V's its output (FP8 pools; 1 otherwise).
  const float scale_log2 = p.k_scale != nullptr ? p.scale_log2 * p.k_scale[kvh] : p.scale_log2;
  const float v_scale = p.v_scale != nullptr ? p.v_scale[kvh] : 1.0f;

  constexpr int kElemBytes = kFp8 ? 1 : 2;
  // Each fragment row's own key range [row_lo, row_hi) (padding rows take the last token's).
  int row_lo[kMTiles][2], row_hi[kMTiles][2];
#pragma unroll
  for (int mi = 0; mi < kMTiles; ++mi)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int t = min((mi * 16 + h * 8 + (lane >> 2)) / G, nq - 1);
      row_hi[mi][h] = first + t + 1;
      row_lo[mi][h] = p.window > 0 ? max(0, first + t - p.window + 1) : 0;
    }

  auto load_kv = [&](int i, int stage) {
#pragma unroll
    for (int u = 0; u < kSub; ++u) {
      const int j = my_tb + i * kSub + u;
      const bool mine = kSub == 1 || j < my_te;  // else zero-filled (an empty key range)
      load_kv_tile<kElemBytes, kThreads>(sK + stage * kTileBytes + u * kSubTileBytes,
                                         sV + stage * kTileBytes + u * kSubTileBytes, p.k_pool, p.v_pool, kv,
                                         mine ? j : 0, mine ? kv_begin : 0, mine ? kv_end : 0, tid);
    }
  };
  // Stage s holds tiles [my_tb + s kSub, ...): before the wait while every key of it precedes `first`.
  int early = 0;
  while (early < kStages - 1 && early < n_iters &&
         min(my_te, my_tb + (early + 1) * kSub) * kBlockN <= first) {
    load_kv(early, early);
    cp_async_commit();
    ++early;
  }
  pdl_wait();
  // Q rows (`rows` valid, the rest zero) by plain loads (the loop's first barrier publishes them), as f16
  // with an FP8 cache; then the rest of the prefetch stages, one commit group a stage as the loop expects.
  load_q_rows_now<kRows, kThreads, kFp8>(smem, p.q, size_t(seq.q_start), hq, head0, G, rows, tid);
  for (int s = early; s < kStages - 1; ++s) {
    if (s < n_iters) load_kv(s, s);
    cp_async_commit();
  }
  // kFp8: this warp's Q fragments in k_frags_e4m3's dim order, held in registers with one m16 tile (plain
  // decode) and re-read every key tile with more.
  uint32_t qa[4][4];
  if constexpr (kFp8 && kMTiles == 1) {
    __syncthreads();  // the queries converted by every thread
    q_frag_permuted(smem, 0, lane, qa);
  }

  float m_run[kMTiles][2], l_run[kMTiles][2], o[kMTiles][8][4];
#pragma unroll
  for (int mi = 0; mi < kMTiles; ++mi) {
#pragma unroll
    for (int h = 0; h < 2; ++h) m_run[mi][h] = -INFINITY, l_run[mi][h] = 0.0f;
#pragma unroll
    for (int dt = 0; dt < 8; ++dt)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[mi][dt][e] = 0.0f;
  }

  for (int it = 0; it < n_iters; ++it) {
    cp_async_wait<kStages - 2>();
    __syncthreads();
    {
      const int nx = it + kStages - 1;
      if (nx < n_iters) load_kv(nx, nx % kStages);
      cp_async_commit();
    }
    const uint32_t kb = sK + (it % kStages) * kTileBytes;
    const uint32_t vb = sV + (it % kStages) * kTileBytes;

    // S = Q K^T for this warp's 16 keys of each sub-tile u (n8 tiles 2u and 2u + 1).
    float s[kMTiles][2 * kSub][4];
#pragma unroll
    for (int mi = 0; mi < kMTiles; ++mi)
#pragma unroll
      for (int nt = 0; nt < 2 * kSub; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[mi][nt][e] = 0.0f;
    uint32_t vf[kSub][2][8];  // kFp8: V's fragments, read early to overlap S
#pragma unroll
    for (int u = 0; u < kSub; ++u) {
      if constexpr (kFp8) {
        const uint8_t* ktile = smem + (kb - sQ) + u * kSubTileBytes;
        const uint8_t* vtile = smem + (vb - sQ) + u * kSubTileBytes;
        uint32_t kf[2][4][2];
        k_frags_e4m3(ktile, warp * 16 + (lane >> 2), lane, kf[0]);
        k_frags_e4m3(ktile, warp * 16 + 8 + (lane >> 2), lane, kf[1]);
        v_frags_e4m3(vtile, warp * 16, lane, vf[u][0]);
        v_frags_e4m3(vtile, warp * 16 + 8, lane, vf[u][1]);
#pragma unroll
        for (int mi = 0; mi < kMTiles; ++mi) {
          uint32_t qm[4][4];
          if constexpr (kMTiles == 1) {
#pragma unroll
            for (int ks = 0; ks < 4; ++ks)
#pragma unroll
              for (int i = 0; i < 4; ++i) qm[ks][i] = qa[ks][i];
          } else {
            q_frag_permuted(smem, mi * 16, lane, qm);
          }
#pragma unroll
          for (int ks = 0; ks < 4; ++ks) {
            mma_f16(s[mi][2 * u], qm[ks], kf[0][ks][0], kf[0][ks][1]);
            mma_f16(s[mi][2 * u + 1], qm[ks], kf[1][ks][0], kf[1][ks][1]);
          }
        }
      } else {
#pragma unroll
        for (int ks = 0; ks < 4; ++ks) {
          uint32_t b[4];
          ldmatrix_x4(kb + u * kSubTileBytes +
                          swz(warp * 16 + (lane & 7) + (lane >> 4) * 8, ks * 2 + ((lane >> 3) & 1)),
                      b);
#pragma unroll
          for (int mi = 0; mi < kMTiles; ++mi) {
            // Q fragments are re-read from shared memory (cheap here) to keep registers for kMTiles > 1.
            uint32_t qf[4];
            ldmatrix_x4(sQ + swz(mi * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, ks * 2 + (lane >> 4)), qf);
            mma_bf16(s[mi][2 * u], qf, b[0], b[1]);
            mma_bf16(s[mi][2 * u + 1], qf, b[2], b[3]);
          }
        }
      }
      const int j = my_tb + it * kSub + u;
      const int k0 = j * kBlockN;
      if (kSub > 1 && j >= my_te) {  // past the split's keys (the zero-filled part of its last iteration)
#pragma unroll
        for (int mi = 0; mi < kMTiles; ++mi)
#pragma unroll
          for (int nt = 2 * u; nt < 2 * u + 2; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) s[mi][nt][e] = -INFINITY;
      } else if (k0 < all_begin || k0 + kBlockN > all_end) {
#pragma unroll
        for (int mi = 0; mi < kMTiles; ++mi)
#pragma unroll
          for (int nt = 2 * u; nt < 2 * u + 2; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int t = k0 + warp * 16 + (nt - 2 * u) * 8 + 2 * (lane & 3) + (e & 1);
              if (t < row_lo[mi][e >> 1] || t >= row_hi[mi][e >> 1]) s[mi][nt][e] = -INFINITY;
            }
      }
    }

#pragma unroll
    for (int mi = 0; mi < kMTiles; ++mi) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if (kLowRows && h == 1) {  // rows g + 8: padding, weight zero
#pragma unroll
          for (int nt = 0; nt < 2 * kSub; ++nt) s[mi][nt][2] = s[mi][nt][3] = 0.0f;
          continue;
        }
        float mx =
            fmaxf(fmaxf(s[mi][0][2 * h], s[mi][0][2 * h + 1]), fmaxf(s[mi][1][2 * h], s[mi][1][2 * h + 1]));
#pragma unroll
        for (int nt = 2; nt < 2 * kSub; ++nt) mx = fmaxf(mx, fmaxf(s[mi][nt][2 * h], s[mi][nt][2 * h + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float m_new = fmaxf(m_run[mi][h], mx * scale_log2);
        const float m_use = m_new == -INFINITY ? 0.0f : m_new;  // a warp whose keys are all masked so far
        const float alpha = fast_exp2(m_run[mi][h] - m_use);
        m_run[mi][h] = m_new;
        float rs = 0.0f;
#pragma unroll
        for (int nt = 0; nt < 2 * kSub; ++nt) {
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

#pragma unroll
    for (int mi = 0; mi < kMTiles; ++mi) {
#pragma unroll
      for (int u = 0; u < kSub; ++u) {
        uint32_t pa[4];
        pa[0] = pack_16<kFp8>(s[mi][2 * u][0], s[mi][2 * u][1]);
        pa[1] = pack_16<kFp8>(s[mi][2 * u][2], s[mi][2 * u][3]);
        pa[2] = pack_16<kFp8>(s[mi][2 * u + 1][0], s[mi][2 * u + 1][1]);
        pa[3] = pack_16<kFp8>(s[mi][2 * u + 1][2], s[mi][2 * u + 1][3]);
        if constexpr (kFp8) {  // output dims permuted (v_frags_e4m3)
#pragma unroll
          for (int dt = 0; dt < 8; ++dt) mma_f16(o[mi][dt], pa, vf[u][0][dt], vf[u][1][dt]);
        } else {
#pragma unroll
          for (int dp = 0; dp < 4; ++dp) {
            uint32_t b[4];
            ldmatrix_x4_trans(vb + u * kSubTileBytes +
                                  swz(warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, dp * 2 + (lane >> 4)),
                              b);
            mma_bf16(o[mi][2 * dp], pa, b[0], b[1]);
            mma_bf16(o[mi][2 * dp + 1], pa, b[2], b[3]);
          }
        }
      }
    }
  }
  cp_async_wait<0>();
  __syncthreads();          // the K/V ring becomes the combine buffer
  pdl_launch_dependents();  // only the combine and the stores are left (kernels/common/pdl.cuh)

  // Combine the four warps: combo O [warp][row][kComboStride], then m [warp][row], l [warp][row].
  float* combo = reinterpret_cast<float*>(smem + Smem::kQBytes);
  float* combo_m = combo + kWarps * kRows * kComboStride;
  float* combo_l = combo_m + kWarps * kRows;
#pragma unroll
  for (int mi = 0; mi < kMTiles; ++mi) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = mi * 16 + h * 8 + (lane >> 2);
      float l = l_run[mi][h];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      if ((lane & 3) == 0) {
        combo_m[warp * kRows + r] = m_run[mi][h];
        combo_l[warp * kRows + r] = l;
      }
      float* row = combo + (warp * kRows + r) * kComboStride;
      if constexpr (kFp8) {  // o[mi][dt][2h + e] is dim 8 (2t + e) + dt (v_frags_e4m3)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float* dst = row + 16 * (lane & 3) + 8 * e;
          *reinterpret_cast<float4*>(dst) =
              make_float4(o[mi][0][2 * h + e], o[mi][1][2 * h + e], o[mi][2][2 * h + e], o[mi][3][2 * h + e]);
          *reinterpret_cast<float4*>(dst + 4) =
              make_float4(o[mi][4][2 * h + e], o[mi][5][2 * h + e], o[mi][6][2 * h + e], o[mi][7][2 * h + e]);
        }
      } else {
        float* dst = row + 2 * (lane & 3);
#pragma unroll
        for (int dt = 0; dt < 8; ++dt)
          *reinterpret_cast<float2*>(dst + dt * 8) = make_float2(o[mi][dt][2 * h], o[mi][dt][2 * h + 1]);
      }
    }
  }
  __syncthreads();

  const bool direct = p.splits == 1;
  for (int i = tid; i < rows * (kHeadDim / 4); i += kThreads) {
    const int r = i >> 4;
    const int d = (i & 15) * 4;
    const int t = r / G, head = head0 + r - t * G;
    float mw[kWarps];
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      mw[w] = combo_m[w * kRows + r];
      mx = fmaxf(mx, mw[w]);
    }
    float sink2 = -INFINITY;
    if (direct && p.sinks != nullptr) sink2 = p.sinks[head] * kLog2e;
    mx = fmaxf(mx, sink2);  // finite with one split (every row's own key is in it)
    if (mx == -INFINITY) {  // none of this row's keys is in the split: weight zero in the merge
      if (d == 0) p.part_lse[part_row(r)] = -INFINITY;
      continue;
    }
    float l = direct ? exp2f(sink2 - mx) : 0.0f;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float wt = exp2f(mw[w] - mx);
      l += combo_l[w * kRows + r] * wt;
      const float4 v = *reinterpret_cast<const float4*>(combo + (w * kRows + r) * kComboStride + d);
      acc.x += v.x * wt, acc.y += v.y * wt, acc.z += v.z * wt, acc.w += v.w * wt;
    }
    const float inv = v_scale / l;
    acc.x *= inv, acc.y *= inv, acc.z *= inv, acc.w *= inv;
    if (direct) {
      uint2 packed = make_uint2(pack_bf16(acc.x, acc.y), pack_bf16(acc.z, acc.w));
      *reinterpret_cast<uint2*>(p.out + (size_t(seq.q_start + t) * hq + head) * kHeadDim + d) = packed;
    } else {
      const size_t prow = part_row(r);
      *reinterpret_cast<float4*>(p.part_o + prow * kHeadDim + d) = acc;
      if (d == 0) p.part_lse[prow] = mx + log2f(l);
    }
  }
}

// One warp per (decode slot, query token, query head): weights the splits' partial outputs by
// exp2(lse - max) and adds the sink's exp2(sink - max) to the denominator (once). The warp works on the
// splits together rather than one after another: lane s reads the log-sum-exps of splits s and s + 32 (a
// plan has at most kMaxDecodeSplits), a warp max and sum give the weights, and the partial outputs (a lane's
// two of the 64 columns) are requested kMergeBatch splits at a time, so the merge is a few round trips to L2
// instead of two per split (at one token and 8k context a full layer's merge runs 33 splits). The
// sequence's record, needed only for the output row, is read beside the log-sum-exps.
constexpr int kMergeBatch = 8;
static_assert(kMaxDecodeSplits <= 64, "decode_merge_kernel reads two splits a lane");
__global__ void __launch_bounds__(kThreads) decode_merge_kernel(const __grid_constant__ DecodeParams p) {
  pdl_wait();  // programmatic dependent launch (kernels/common/pdl.cuh)
  const int lane = threadIdx.x & 31;
  const int head = blockIdx.x * kWarps + (threadIdx.x >> 5);
  const int slot = blockIdx.y, t = blockIdx.z;
  if (head >= p.num_q_heads) return;  // warp-uniform, as every exit below
  const int splits = p.splits;
  const size_t row0 = ((size_t(slot) * p.decode_q + t) * p.num_q_heads + head) * splits;
  // In the workspace whatever the slot holds; used only for a live row. -inf: an empty split (its partial
  // output was never written) or no split at all.
  const float lse0 = lane < splits ? p.part_lse[row0 + lane] : -INFINITY;
  const float lse1 = lane + 32 < splits ? p.part_lse[row0 + lane + 32] : -INFINITY;
  const float sink2 = p.sinks != nullptr ? p.sinks[head] * kLog2e : -INFINITY;
  const int seq_idx = p.decode_seqs[slot];
  if (seq_idx < 0) return;
  const AttnSeq seq = p.seqs[seq_idx];
  if (t >= seq.num_q) return;
  float mx = fmaxf(sink2, fmaxf(lse0, lse1));
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  // A live row has a key in some split (its own token), so mx is finite.
  const float w0 = lse0 == -INFINITY ? 0.0f : exp2f(lse0 - mx);
  const float w1 = lse1 == -INFINITY ? 0.0f : exp2f(lse1 - mx);
  float l = w0 + w1;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) l += __shfl_xor_sync(0xffffffffu, l, o);
  l += exp2f(sink2 - mx);
  float acc0 = 0.0f, acc1 = 0.0f;
  for (int s0 = 0; s0 < splits; s0 += kMergeBatch) {
    float wt[kMergeBatch];
    float2 v[kMergeBatch];
#pragma unroll
    for (int j = 0; j < kMergeBatch; ++j) {
      const int s = s0 + j;
      wt[j] = __shfl_sync(0xffffffffu, s < 32 ? w0 : w1, s & 31);
      v[j] = s < splits && wt[j] != 0.0f
                 ? *reinterpret_cast<const float2*>(p.part_o + (row0 + s) * kHeadDim + 2 * lane)
                 : make_float2(0.0f, 0.0f);
    }
#pragma unroll
    for (int j = 0; j < kMergeBatch; ++j) {
      acc0 = fmaf(v[j].x, wt[j], acc0);
      acc1 = fmaf(v[j].y, wt[j], acc1);
    }
  }
  const float inv = 1.0f / l;
  *reinterpret_cast<uint32_t*>(p.out + (size_t(seq.q_start + t) * p.num_q_heads + head) * kHeadDim +
                               2 * lane) = pack_bf16(acc0 * inv, acc1 * inv);
}

// One flag of ensure_dynamic_smem per kernel instantiation (kernels of one shared-memory layout differ).
template <int kMTiles, bool kFp8, int kStages, int kSub, bool kLowRows>
struct DecodeKernelTag {};

template <int kMTiles, bool kFp8, int kStages, int kSub, bool kLowRows>
void launch_decode(const DecodeParams& p, int bucket, cudaStream_t stream) {
  using Smem = DecodeSmem<kMTiles, kFp8, kStages, kSub>;
  auto kernel = decode_kernel<kMTiles, kFp8, kStages, kSub, kLowRows>;
  ensure_dynamic_smem<DecodeKernelTag<kMTiles, kFp8, kStages, kSub, kLowRows>>(kernel, Smem::kBytes);
  const dim3 grid(unsigned(p.splits), unsigned(p.num_kv_heads), unsigned(bucket));
  launch_pdl(kernel, dim3(grid), dim3(kThreads), Smem::kBytes, stream, p);
  ORCHID_CUDA_CHECK_LAUNCH();
}

// CTAs of a decode kernel instance resident on one SM (its shared memory and registers), once per process.
template <int kMTiles, bool kFp8, int kStages>
int resident_ctas() {
  static const int n = [] {
    using Smem = DecodeSmem<kMTiles, kFp8, kStages, 1>;
    auto kernel = decode_kernel<kMTiles, kFp8, kStages, 1, false>;
    ensure_dynamic_smem<DecodeKernelTag<kMTiles, kFp8, kStages, 1, false>>(kernel, Smem::kBytes);
    int blocks = 0;
    ORCHID_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, kThreads, Smem::kBytes));
    return blocks;
  }();
  return n;
}

// BF16 ring depth: 4 stages (more bytes in flight per CTA) while the grid fits in one wave of their CTAs,
// else 3 when that fits more CTAs an SM (B = 64 x 8 KV heads: 512 CTAs are one wave of four an SM instead
// of two of three). ORCHID_DECODE_STAGES=3|4 fixes it for a whole process (the A/B).
template <int kMTiles>
int decode_stages(long long ctas) {
  static const int forced = [] {
    const char* v = std::getenv("ORCHID_DECODE_STAGES");
    return v != nullptr && (std::strcmp(v, "3") == 0 || std::strcmp(v, "4") == 0) ? std::atoi(v) : 0;
  }();
  if (forced != 0) return forced;
  const int deep = resident_ctas<kMTiles, false, 4>(), shallow = resident_ctas<kMTiles, false, 3>();
  return ctas > (long long)deep * device_info().sm_count && shallow > deep ? 3 : 4;
}

// e4m3 tiles a loop iteration of a plain decode (one m16 tile of query rows): 2 (two 64-key tiles a stage,
// 3 stages) or 1 (6 stages of one); the same 48 KB ring. ORCHID_DECODE_FP8_SUB=1|2 fixes it for a whole
// process (the A/B). Verify steps' larger row tiles take one (two would spill or halve the CTAs an SM).
int fp8_sub_tiles() {
  static const int n = [] {
    const char* v = std::getenv("ORCHID_DECODE_FP8_SUB");
    return v != nullptr && std::strcmp(v, "1") == 0 ? 1 : 2;
  }();
  return n;
}

template <int kMTiles, bool kFp8, bool kLowRows = false>
void launch_decode_depth(const DecodeParams& p, int bucket, int stages, cudaStream_t stream) {
  if constexpr (kFp8) {
    if (kMTiles == 1 && fp8_sub_tiles() == 2)
      launch_decode<1, true, 3, 2, kLowRows>(p, bucket, stream);
    else
      launch_decode<kMTiles, true, 6, 1, kLowRows>(p, bucket, stream);
  } else {
    const long long ctas = (long long)p.splits * p.num_kv_heads * bucket;
    if ((stages != 0 ? stages : decode_stages<kMTiles>(ctas)) == 3)
      launch_decode<kMTiles, false, 3, 1, kLowRows>(p, bucket, stream);
    else
      launch_decode<kMTiles, false, 4, 1, kLowRows>(p, bucket, stream);
  }
}

// Whether CTAs of at most 8 query rows skip the padding rows' softmax (kLowRows): on unless
// ORCHID_DECODE_LOW_ROWS=0 (the A/B).
bool low_rows_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("ORCHID_DECODE_LOW_ROWS");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return on;
}

template <bool kFp8>
void launch_decode_rows(const DecodeParams& p, int rows, int bucket, int stages, cudaStream_t stream) {
  if (rows <= 8 && low_rows_enabled())
    launch_decode_depth<1, kFp8, true>(p, bucket, stages, stream);
  else if (rows <= 16)
    launch_decode_depth<1, kFp8>(p, bucket, stages, stream);
  else if (rows <= 32)
    launch_decode_depth<2, kFp8>(p, bucket, stages, stream);
  else
    launch_decode_depth<4, kFp8>(p, bucket, stages, stream);
}

}  // namespace

void sink_attention_decode(const SinkAttentionArgs& a, const AttentionPlan& plan, void* workspace,
                           cudaStream_t stream) {
  if (plan.decode_bucket == 0) return;
  const int log2_page = log2_exact(a.page_size);
  ORCHID_KERNEL_REQUIRE(log2_page >= 0, "sink_attention: page_size must be a power of two");
  ORCHID_KERNEL_REQUIRE(plan.num_kv_heads > 0 && plan.num_q_heads % plan.num_kv_heads == 0,
                        "sink_attention: bad head counts in the plan");
  const int group = plan.num_q_heads / plan.num_kv_heads;
  ORCHID_KERNEL_REQUIRE(plan.decode_q >= 1 && plan.decode_q * group <= kMaxDecodeRows,
                        "sink_attention: decode takes at most 64 query rows (tokens x heads) per KV head");
  ORCHID_KERNEL_REQUIRE(plan.decode_splits >= 1 && plan.decode_splits <= 65535 && plan.decode_bucket <= 65535,
                        "sink_attention: bad decode grid in the plan");
  // Sliding-window launches take the plan's split count for them (a window has few key tiles).
  const int splits = a.window > 0 ? plan.decode_splits_window : plan.decode_splits;
  ORCHID_KERNEL_REQUIRE(splits >= 1 && splits <= plan.decode_splits && splits <= kMaxDecodeSplits,
                        "sink_attention: bad window split count");
  ORCHID_KERNEL_REQUIRE(splits == 1 || workspace != nullptr,
                        "sink_attention: split-KV decode needs the workspace");
  ORCHID_KERNEL_REQUIRE(a.window >= 0, "sink_attention: negative window");
  auto aligned = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; };
  ORCHID_KERNEL_REQUIRE(
      aligned(a.q) && aligned(a.k_pool) && aligned(a.v_pool) && aligned(a.out) && aligned(workspace),
      "sink_attention: q, pools, out and workspace must be 16-byte aligned");
  DecodeParams p;
  p.q = a.q;
  p.k_pool = a.k_pool;
  p.v_pool = a.v_pool;
  p.k_scale = a.kv_fp8 ? a.k_scale : nullptr;
  p.v_scale = a.kv_fp8 ? a.v_scale : nullptr;
  p.page_table = a.page_table;
  p.sinks = a.sinks;
  p.out = a.out;
  const size_t part_rows = size_t(plan.decode_bucket) * plan.decode_q * plan.num_q_heads * splits;
  p.part_o = static_cast<float*>(workspace);
  p.part_lse = workspace != nullptr ? p.part_o + part_rows * kHeadDim : nullptr;
  p.seqs = plan.seqs;
  p.decode_seqs = plan.decode_seqs;
  p.table_kind = int(a.table_kind);
  p.num_q_heads = plan.num_q_heads;
  p.num_kv_heads = plan.num_kv_heads;
  p.group = group;
  p.decode_q = plan.decode_q;
  p.splits = splits;
  p.page_size_log2 = log2_page;
  p.window = a.window;
  p.scale_log2 = a.softmax_scale * kLog2e;
  const int rows = plan.decode_q * group;
  ORCHID_KERNEL_REQUIRE(a.decode_stages == 0 || a.decode_stages == 3 || a.decode_stages == 4,
                        "sink_attention: decode_stages must be 0, 3 or 4");
  if (a.kv_fp8)
    launch_decode_rows<true>(p, rows, plan.decode_bucket, 0, stream);
  else
    launch_decode_rows<false>(p, rows, plan.decode_bucket, a.decode_stages, stream);
  if (splits > 1) {
    const dim3 grid(unsigned((plan.num_q_heads + kWarps - 1) / kWarps), unsigned(plan.decode_bucket),
                    unsigned(plan.decode_q));
    launch_pdl(decode_merge_kernel, dim3(grid), dim3(kThreads), 0, stream, p);
    ORCHID_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace orchid::kernels::attention
