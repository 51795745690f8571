// Napkin math (gpt-oss, 8192 tokens, window 128): per (token, head, key) 64 FMAs for the score and 64 for the
// value sum: 17 GFLOP on CUDA cores (0.26 ms at the 67 TFLOP/s FP32 peak). K/V of a KV head are staged once
// for 8 neighbouring tokens (135 keys instead of 8 x 128): 8192 / 8 x 8 CTAs x 5 tiles x 16 KB = 0.7 GB,
// mostly from L2.
//
// Steps with prefill tokens: CTA = 8 consecutive token rows x one KV head, 8 warps; warp w serves row w and
// the query heads of the KV head, 8 per pass. Rows of one sequence form a run; a run's keys (the union of its
// rows' windows) come in tiles of 32 through shared memory (K rows padded to 68 floats: float4 reads free of
// bank conflicts). Lane j scores key j for every head of the pass (each K float4 read once for all heads),
// the warp keeps an online softmax (m, l) per head, and each lane accumulates two of the 64 output dimensions
// over the tile's keys (each V pair read once for all heads; probabilities pass through shared memory).
//
// Decode steps (no prefill tile) take a kernel of their own: one CTA per (token, KV head), 4 warps, each
// scoring 32 keys of a round of 128 at once (lane = key) for the pass's 8 heads, with its own online
// softmax; the warps meet in shared memory at the end. A 128-key window is then one round: all of a
// token's K/V loads are in flight together. (The kernel above with one row per CTA waits for four tiles in
// turn, two dependent loads and two barriers each: 176 against 83 us at B=256 on an H100.)
#include "kernels/attention/kv_layout.h"
#include "kernels/attention/precise_attention.h"

#include <climits>

#include "kernels/attention/warp_mma.cuh"
#include "kernels/common/cuda_check.h"

namespace orchid::kernels::attention {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kHeads = 8;               // query heads per warp and pass (larger groups take several passes)
constexpr int kTile = 32;               // keys per staged tile: lane j scores key j
constexpr int kKStride = kHeadDim + 4;  // K rows padded to 68 floats: float4 reads without bank conflicts

struct Params {
  PreciseAttentionArgs a;
  const AttnSeq* seqs;
  const int32_t* token_seq;
  const int32_t* token_pos;
  int num_tokens, num_q_heads, num_kv_heads, group, page_size_log2;
};

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// sc[h] = q[h] . k (k: one key's 64 floats in shared memory) for the pass's nh heads; each K float4 is read
// once for all heads.
__device__ __forceinline__ void score_heads(const float* k, const float (*q)[kHeadDim], int nh,
                                            float (&sc)[kHeads]) {
#pragma unroll
  for (int h = 0; h < kHeads; ++h) sc[h] = 0.0f;
#pragma unroll 4
  for (int d = 0; d < kHeadDim; d += 4) {
    const float4 kk = *reinterpret_cast<const float4*>(k + d);
#pragma unroll
    for (int h = 0; h < kHeads; ++h) {
      if (h < nh) {
        const float4 qq = *reinterpret_cast<const float4*>(&q[h][d]);
        sc[h] = fmaf(qq.x, kk.x, sc[h]);
        sc[h] = fmaf(qq.y, kk.y, sc[h]);
        sc[h] = fmaf(qq.z, kk.z, sc[h]);
        sc[h] = fmaf(qq.w, kk.w, sc[h]);
      }
    }
  }
}

// One tile of the warp's online softmax per head (lane = key; `valid`: the lane's key counts): updates
// (m, l), rescales acc and leaves the tile's probabilities in p[h][lane]. A tile without a valid key leaves
// everything as it was (m stays -inf until one comes).
__device__ __forceinline__ void softmax_tile(bool valid, const float (&sc)[kHeads], int nh, float scale,
                                             float (&m)[kHeads], float (&l)[kHeads], float (&acc)[kHeads][2],
                                             float (*p)[kTile], int lane) {
#pragma unroll
  for (int h = 0; h < kHeads; ++h) {
    if (h < nh) {
      const float sv = valid ? sc[h] * scale : -INFINITY;
      const float m_new = fmaxf(m[h], warp_max(sv));
      const float corr = m_new == -INFINITY ? 1.0f : expf(m[h] - m_new);
      const float pr = valid ? expf(sv - m_new) : 0.0f;
      l[h] = l[h] * corr + warp_sum(pr);
      acc[h][0] *= corr;
      acc[h][1] *= corr;
      m[h] = m_new;
      p[h][lane] = pr;
    }
  }
}

struct __align__(16) Smem {
  float k[kTile][kKStride];
  float v[kTile][kHeadDim];
  float q[kWarps][kHeads][kHeadDim];  // each warp's queries of the pass
  float p[kWarps][kHeads][kTile];
  int seq[kWarps], pos[kWarps];
};

// kRows = kWarps token rows per CTA, warp w serving row w (neighbouring rows share the staged keys).
constexpr int kRows = kWarps;

__global__ void __launch_bounds__(kThreads) precise_attention_kernel(const __grid_constant__ Params p) {
  __shared__ Smem s;
  const int t0 = blockIdx.x * kRows, g = blockIdx.y;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int row = warp;
  if (threadIdx.x < kRows) {
    const int t = t0 + threadIdx.x;
    s.seq[threadIdx.x] = t < p.num_tokens ? p.token_seq[t] : -1;
    s.pos[threadIdx.x] = t < p.num_tokens ? p.token_pos[t] : 0;
  }
  __syncthreads();
  const int q_stride = p.a.q_stride ? p.a.q_stride : p.num_q_heads * kHeadDim;
  const int window = p.a.window;
  const int my_pos = s.pos[row];
  const int my_lo = window > 0 ? max(0, my_pos - window + 1) : 0;

  // Runs: rows of one sequence are adjacent in the plan, so a CTA holds a few runs (one in a prefill, up to
  // eight in a batch of decodes). Each run stages the union of its rows' keys once.
  for (int r0 = 0; r0 < kRows;) {
    const int seq = s.seq[r0];
    int r1 = r0 + 1;
    while (r1 < kRows && s.seq[r1] == seq) ++r1;
    if (seq < 0) {  // padding rows
      r0 = r1;
      continue;
    }
    int kbeg = INT_MAX, kend = -1;
    for (int r = r0; r < r1; ++r) {
      kbeg = min(kbeg, window > 0 ? max(0, s.pos[r] - window + 1) : 0);
      kend = max(kend, s.pos[r]);
    }
    const int32_t* table = p.a.page_table + (&p.seqs[seq].table_begin[0])[p.a.table_kind];
    const bool active = row >= r0 && row < r1;  // this warp's row belongs to the run
    for (int h0 = 0; h0 < p.group; h0 += kHeads) {
      const int nh = min(kHeads, p.group - h0);  // the pass's heads: h0 .. h0 + nh
      __syncwarp();                              // the previous pass is done with this warp's s.q
      if (active) {
        for (int i = lane; i < nh * (kHeadDim / 4); i += 32) {
          const int d4 = i % (kHeadDim / 4), h = i / (kHeadDim / 4);
          const int head = g * p.group + h0 + h;
          const float* src = p.a.q + size_t(t0 + row) * size_t(q_stride) + size_t(head) * kHeadDim;
          *reinterpret_cast<float4*>(&s.q[warp][h][4 * d4]) = reinterpret_cast<const float4*>(src)[d4];
        }
      }
      float m[kHeads], l[kHeads], acc[kHeads][2];
#pragma unroll
      for (int h = 0; h < kHeads; ++h) m[h] = -INFINITY, l[h] = 0.0f, acc[h][0] = acc[h][1] = 0.0f;

      for (int k0 = kbeg; k0 <= kend; k0 += kTile) {
        __syncthreads();  // the previous tile is consumed (and s.q is written before the first)
        for (int i = threadIdx.x; i < kTile * kHeadDim / 4; i += kThreads) {
          const int j = i / (kHeadDim / 4), d = (i % (kHeadDim / 4)) * 4;
          const int key = k0 + j;
          float4 kv = make_float4(0.f, 0.f, 0.f, 0.f), vv = kv;
          if (key <= kend) {
            const int32_t page = table[key >> p.page_size_log2];
            const size_t off =
                kv_offset(page, g, key & ((1 << p.page_size_log2) - 1), p.num_kv_heads, p.page_size_log2) +
                size_t(d);
            kv = *reinterpret_cast<const float4*>(p.a.k_pool + off);
            vv = *reinterpret_cast<const float4*>(p.a.v_pool + off);
          }
          *reinterpret_cast<float4*>(&s.k[j][d]) = kv;
          *reinterpret_cast<float4*>(&s.v[j][d]) = vv;
        }
        __syncthreads();
        const int key = k0 + lane;
        const bool valid = active && key >= my_lo && key <= my_pos;
        if (!active || k0 > my_pos || k0 + kTile <= my_lo) continue;  // warp-uniform
        float sc[kHeads];
        score_heads(&s.k[lane][0], s.q[warp], nh, sc);
        softmax_tile(valid, sc, nh, p.a.softmax_scale, m, l, acc, s.p[warp], lane);
        __syncwarp();
        // Values: lane owns dimensions 2 lane, 2 lane + 1; each V pair is read once for all heads.
#pragma unroll 4
        for (int j = 0; j < kTile; ++j) {
          const float2 vv = *reinterpret_cast<const float2*>(&s.v[j][2 * lane]);
#pragma unroll
          for (int h = 0; h < kHeads; ++h) {
            if (h < nh) {
              const float pj = s.p[warp][h][j];
              acc[h][0] = fmaf(pj, vv.x, acc[h][0]);
              acc[h][1] = fmaf(pj, vv.y, acc[h][1]);
            }
          }
        }
        __syncwarp();  // s.p is rewritten by the next tile
      }
      if (!active) continue;
        // The sink joins the denominator once: rescale to the common max and divide.
#pragma unroll
      for (int h = 0; h < kHeads; ++h) {
        if (h < nh) {
          const int head = g * p.group + h0 + h;
          float scale = 1.0f, denom = l[h];
          if (p.a.sinks != nullptr) {
            const float sink = p.a.sinks[head];
            const float m_all = fmaxf(m[h], sink);
            scale = expf(m[h] - m_all);
            denom = denom * scale + expf(sink - m_all);
          }
          const float o0 = acc[h][0] * scale / denom, o1 = acc[h][1] * scale / denom;
          const __nv_bfloat162 hi = __floats2bfloat162_rn(o0, o1);
          const float2 hf = __bfloat1622float2(hi);
          const __nv_bfloat162 lo2 = __floats2bfloat162_rn(o0 - hf.x, o1 - hf.y);
          const size_t at = (size_t(t0 + row) * p.num_q_heads + head) * kHeadDim + 2 * lane;
          *reinterpret_cast<__nv_bfloat162*>(p.a.out_hi + at) = hi;
          *reinterpret_cast<__nv_bfloat162*>(p.a.out_lo + at) = lo2;
        }
      }
    }
    r0 = r1;
  }
}

// Decode steps: CTA = (token, KV head), kDecodeWarps warps; a round is kDecodeWarps * 32 keys, warp w
// scoring keys round + 32 w + lane for the pass's heads. K rows come to shared memory by cp.async
// (zero-filled outside the token's range: stale cache entries may be NaN), V rows straight into registers
// (lane: its two dimensions of each of the warp's 32 rows, a row being 256 contiguous bytes). Each warp keeps
// (m, l, acc) per head over the rounds; the warps are merged at the end of a pass.
constexpr int kDecodeWarps = 4;
constexpr int kDecodeKeys = kDecodeWarps * kTile;

struct __align__(16) DecodeSmem {
  union {
    float k[kDecodeWarps][kTile][kKStride];   // a round's K rows (warp w: its 32 keys)
    float o[kDecodeWarps][kHeads][kHeadDim];  // then each warp's unnormalized outputs, for the merge
  };
  float q[kHeads][kHeadDim];
  float p[kDecodeWarps][kHeads][kTile];
  float m[kDecodeWarps][kHeads], l[kDecodeWarps][kHeads];
};

__global__ void __launch_bounds__(kDecodeWarps * 32) precise_decode_kernel(const __grid_constant__ Params p) {
  __shared__ DecodeSmem s;
  const int t = blockIdx.x, g = blockIdx.y;
  const int seq = p.token_seq[t];
  if (seq < 0) return;  // padding token: its output rows stay as they are
  const int pos = p.token_pos[t];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int lo = p.a.window > 0 ? max(0, pos - p.a.window + 1) : 0;
  const int32_t* table = p.a.page_table + (&p.seqs[seq].table_begin[0])[p.a.table_kind];
  const int q_stride = p.a.q_stride ? p.a.q_stride : p.num_q_heads * kHeadDim;
  const int slot_mask = (1 << p.page_size_log2) - 1;

  for (int h0 = 0; h0 < p.group; h0 += kHeads) {
    const int nh = min(kHeads, p.group - h0);
    __syncthreads();  // the previous pass is done with s.q and s.o
    for (int i = threadIdx.x; i < nh * (kHeadDim / 4); i += kDecodeWarps * 32) {
      const int h = i / (kHeadDim / 4), d4 = i % (kHeadDim / 4);
      const float* src = p.a.q + size_t(t) * size_t(q_stride) + size_t(g * p.group + h0 + h) * kHeadDim;
      *reinterpret_cast<float4*>(&s.q[h][4 * d4]) = reinterpret_cast<const float4*>(src)[d4];
    }
    __syncthreads();
    float m[kHeads], l[kHeads], acc[kHeads][2];
#pragma unroll
    for (int h = 0; h < kHeads; ++h) m[h] = -INFINITY, l[h] = 0.0f, acc[h][0] = acc[h][1] = 0.0f;

    for (int r0 = lo; r0 <= pos; r0 += kDecodeKeys) {
      const int kw = r0 + warp * kTile;  // this warp's first key of the round
      if (kw > pos) continue;            // warp-uniform; no block-wide barrier inside the round loop
      const int key = kw + lane;
      const int32_t page = key <= pos ? table[key >> p.page_size_log2] : kNoPage;
      const bool valid = key <= pos && page != kNoPage;
      __syncwarp();  // the previous round's reads of this warp's K rows are done
      // K: 32 rows x 16 float4, consecutive lanes on consecutive float4 of a row (two rows an instruction).
#pragma unroll
      for (int r = 0; r < kTile / 2; ++r) {
        const int j = 2 * r + (lane >> 4), d = 4 * (lane & 15);
        const int32_t pj = __shfl_sync(0xffffffffu, page, j);
        const bool ok = kw + j <= pos && pj != kNoPage;
        const float* src =
            ok ? p.a.k_pool + kv_offset(pj, g, (kw + j) & slot_mask, p.num_kv_heads, p.page_size_log2) + d
               : p.a.k_pool;
        detail::cp_async_16(detail::smem_addr(&s.k[warp][j][d]), src, ok);
      }
      detail::cp_async_commit();
      // V: lane's dimensions 2 lane, 2 lane + 1 of each row; zero outside the range (0 x NaN would poison).
      float2 v[kTile];
#pragma unroll
      for (int j = 0; j < kTile; ++j) {
        const int32_t pj = __shfl_sync(0xffffffffu, page, j);
        v[j] = make_float2(0.0f, 0.0f);
        if (kw + j <= pos && pj != kNoPage)
          v[j] = *reinterpret_cast<const float2*>(
              p.a.v_pool + kv_offset(pj, g, (kw + j) & slot_mask, p.num_kv_heads, p.page_size_log2) +
              2 * lane);
      }
      detail::cp_async_wait<0>();
      __syncwarp();
      float sc[kHeads];
      score_heads(&s.k[warp][lane][0], s.q, nh, sc);
      softmax_tile(valid, sc, nh, p.a.softmax_scale, m, l, acc, s.p[warp], lane);
      __syncwarp();
#pragma unroll
      for (int j4 = 0; j4 < kTile; j4 += 4) {
#pragma unroll
        for (int h = 0; h < kHeads; ++h) {
          if (h < nh) {
            const float4 pj = *reinterpret_cast<const float4*>(&s.p[warp][h][j4]);
            acc[h][0] = fmaf(pj.x, v[j4].x, acc[h][0]);
            acc[h][1] = fmaf(pj.x, v[j4].y, acc[h][1]);
            acc[h][0] = fmaf(pj.y, v[j4 + 1].x, acc[h][0]);
            acc[h][1] = fmaf(pj.y, v[j4 + 1].y, acc[h][1]);
            acc[h][0] = fmaf(pj.z, v[j4 + 2].x, acc[h][0]);
            acc[h][1] = fmaf(pj.z, v[j4 + 2].y, acc[h][1]);
            acc[h][0] = fmaf(pj.w, v[j4 + 3].x, acc[h][0]);
            acc[h][1] = fmaf(pj.w, v[j4 + 3].y, acc[h][1]);
          }
        }
      }
    }
    // Merge the warps: each one's (m, l, acc) rescaled to the common max; the sink joins the denominator
    // once.
    __syncthreads();  // every warp is done with s.k, which s.o overlays
#pragma unroll
    for (int h = 0; h < kHeads; ++h) {
      if (h < nh) {
        *reinterpret_cast<float2*>(&s.o[warp][h][2 * lane]) = make_float2(acc[h][0], acc[h][1]);
        if (lane == 0) s.m[warp][h] = m[h], s.l[warp][h] = l[h];
      }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < nh * 32; i += kDecodeWarps * 32) {
      const int h = i / 32, dp = i % 32, head = g * p.group + h0 + h;
      float mx = -INFINITY;
#pragma unroll
      for (int w = 0; w < kDecodeWarps; ++w) mx = fmaxf(mx, s.m[w][h]);
      if (p.a.sinks != nullptr) mx = fmaxf(mx, p.a.sinks[head]);
      if (mx == -INFINITY) mx = 0.0f;  // no key and no sink (a broken table): the output is 0
      float denom = p.a.sinks != nullptr ? expf(p.a.sinks[head] - mx) : 0.0f, o0 = 0.0f, o1 = 0.0f;
#pragma unroll
      for (int w = 0; w < kDecodeWarps; ++w) {
        const float f = expf(s.m[w][h] - mx);  // 0 for a warp without keys
        denom = fmaf(s.l[w][h], f, denom);
        o0 = fmaf(s.o[w][h][2 * dp], f, o0);
        o1 = fmaf(s.o[w][h][2 * dp + 1], f, o1);
      }
      const float inv = denom > 0.0f ? 1.0f / denom : 0.0f;
      o0 *= inv;
      o1 *= inv;
      const __nv_bfloat162 hi = __floats2bfloat162_rn(o0, o1);
      const float2 hf = __bfloat1622float2(hi);
      const __nv_bfloat162 lo2 = __floats2bfloat162_rn(o0 - hf.x, o1 - hf.y);
      const size_t at = (size_t(t) * p.num_q_heads + head) * kHeadDim + 2 * dp;
      *reinterpret_cast<__nv_bfloat162*>(p.a.out_hi + at) = hi;
      *reinterpret_cast<__nv_bfloat162*>(p.a.out_lo + at) = lo2;
    }
  }
}

}  // namespace

void precise_sink_attention(const PreciseAttentionArgs& a, const AttentionPlan& plan, cudaStream_t stream) {
  const int log2_page = log2_exact(a.page_size);
  ORCHID_KERNEL_REQUIRE(log2_page >= 0, "precise attention: page_size must be a power of two");
  ORCHID_KERNEL_REQUIRE(
      plan.num_q_heads > 0 && plan.num_kv_heads > 0 && plan.num_q_heads % plan.num_kv_heads == 0,
      "precise attention: bad head counts");
  const int group = plan.num_q_heads / plan.num_kv_heads;
  ORCHID_KERNEL_REQUIRE(group <= kMaxDecodeRows, "precise attention: more than 64 query heads per KV head");
  ORCHID_KERNEL_REQUIRE(a.q_stride == 0 || (a.q_stride >= plan.num_q_heads * kHeadDim && a.q_stride % 4 == 0),
                        "precise attention: q_stride below the row or not a multiple of 4");
  auto aligned = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; };
  ORCHID_KERNEL_REQUIRE(
      aligned(a.q) && aligned(a.k_pool) && aligned(a.v_pool) && aligned(a.out_hi) && aligned(a.out_lo),
      "precise attention: pointers must be 16-byte aligned");
  ORCHID_KERNEL_REQUIRE(a.window >= 0, "precise attention: negative window");
  if (plan.num_tokens == 0) return;
  Params p;
  p.a = a;
  p.seqs = plan.seqs;
  p.token_seq = plan.token_seq;
  p.token_pos = plan.token_pos;
  p.num_tokens = plan.num_tokens;
  p.num_q_heads = plan.num_q_heads;
  p.num_kv_heads = plan.num_kv_heads;
  p.group = group;
  p.page_size_log2 = log2_page;
  // A step without prefill tiles is all decodes (one row per sequence, or a verify step's few): one CTA per
  // token and KV head. Otherwise CTAs of kRows neighbouring rows.
  if (plan.num_prefill_tiles == 0) {
    precise_decode_kernel<<<dim3(unsigned(plan.num_tokens), unsigned(plan.num_kv_heads)), kDecodeWarps * 32,
                            0, stream>>>(p);
  } else {
    const unsigned blocks = unsigned((plan.num_tokens + kRows - 1) / kRows);
    precise_attention_kernel<<<dim3(blocks, unsigned(plan.num_kv_heads)), kThreads, 0, stream>>>(p);
  }
  ORCHID_CUDA_CHECK_LAUNCH();
}

}  // namespace orchid::kernels::attention
