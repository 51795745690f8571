// Napkin math (gpt-oss, 8192 tokens, window 128): 8192 x 8 CTAs each read <= 160 keys of K and V in fp32
// (80 KB, mostly from L2: neighbouring tokens share their keys), 5.2 GB of L2 traffic; 2 x 64 FMAs per key
// and head: 17 GFLOP on CUDA cores. About a millisecond per prefill of 8k, once per model (the first layer).
//
// CTA: 8 warps; warp w serves the query heads w, w + 8, ... of the KV head's group (one for gpt-oss). Keys
// come in tiles of 32 staged in shared memory (K rows padded to 65 floats: lane j reads key j's row without
// bank conflicts); lane j scores key j, the warp keeps an online softmax (m, l) and each lane accumulates two
// of the 64 output dimensions over the tile's keys.
#include "kernels/attention/kv_layout.h"
#include "kernels/attention/precise_attention.h"

#include "kernels/common/cuda_check.h"

namespace orchid::kernels::attention {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kTile = 32;
constexpr int kMaxHeadsPerWarp = kMaxDecodeGroup / kWarps;  // groups up to 64 heads
constexpr int kKStride = kHeadDim + 1;

struct Params {
  PreciseAttentionArgs a;
  const AttnSeq* seqs;
  const int32_t* token_seq;
  const int32_t* token_pos;
  int num_q_heads, num_kv_heads, group, page_size_log2;
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

__global__ void __launch_bounds__(kThreads) precise_attention_kernel(const __grid_constant__ Params p) {
  const int t = blockIdx.x, g = blockIdx.y;
  const int seq = p.token_seq[t];
  if (seq < 0) return;
  const int pos = p.token_pos[t];
  const int lo = p.a.window > 0 ? max(0, pos - p.a.window + 1) : 0;
  const int32_t* table = p.a.page_table + (&p.seqs[seq].table_begin[0])[p.a.table_kind];
  const int q_stride = p.a.q_stride ? p.a.q_stride : p.num_q_heads * kHeadDim;

  __shared__ float s_q[kMaxDecodeGroup][kHeadDim];
  __shared__ float s_k[kTile][kKStride];
  __shared__ float s_v[kTile][kHeadDim];
  const float* q_row = p.a.q + size_t(t) * size_t(q_stride) + size_t(g) * p.group * kHeadDim;
  for (int i = threadIdx.x; i < p.group * kHeadDim; i += kThreads) s_q[i / kHeadDim][i % kHeadDim] = q_row[i];

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  float m[kMaxHeadsPerWarp], l[kMaxHeadsPerWarp], acc[kMaxHeadsPerWarp][2];
#pragma unroll
  for (int i = 0; i < kMaxHeadsPerWarp; ++i) m[i] = -INFINITY, l[i] = 0.0f, acc[i][0] = acc[i][1] = 0.0f;

  for (int k0 = lo; k0 <= pos; k0 += kTile) {
    __syncthreads();  // the previous tile is consumed (and s_q is written before the first)
    // Stage keys k0 .. k0 + 31 (those beyond pos as zeros): 32 x 64 floats of K and of V, 8 per thread.
    for (int i = threadIdx.x; i < kTile * kHeadDim / 4; i += kThreads) {
      const int j = i / (kHeadDim / 4), d = (i % (kHeadDim / 4)) * 4;
      const int key = k0 + j;
      float4 kv = make_float4(0.f, 0.f, 0.f, 0.f), vv = kv;
      if (key <= pos) {
        const int32_t page = table[key >> p.page_size_log2];
        const size_t off =
            kv_offset(page, g, key & ((1 << p.page_size_log2) - 1), p.num_kv_heads, p.page_size_log2) +
            size_t(d);
        kv = *reinterpret_cast<const float4*>(p.a.k_pool + off);
        vv = *reinterpret_cast<const float4*>(p.a.v_pool + off);
      }
      s_k[j][d] = kv.x, s_k[j][d + 1] = kv.y, s_k[j][d + 2] = kv.z, s_k[j][d + 3] = kv.w;
      *reinterpret_cast<float4*>(&s_v[j][d]) = vv;
    }
    __syncthreads();
    const bool valid = k0 + lane <= pos;
#pragma unroll
    for (int i = 0; i < kMaxHeadsPerWarp; ++i) {
      const int h = warp + i * kWarps;  // head within the group
      if (h >= p.group) break;
      float s = 0.0f;
#pragma unroll 16
      for (int d = 0; d < kHeadDim; ++d) s = fmaf(s_q[h][d], s_k[lane][d], s);
      s = valid ? s * p.a.softmax_scale : -INFINITY;
      const float m_new = fmaxf(m[i], warp_max(s));  // finite: key k0 <= pos is always valid
      const float corr = expf(m[i] - m_new);
      const float pr = valid ? expf(s - m_new) : 0.0f;
      l[i] = l[i] * corr + warp_sum(pr);
      float o0 = acc[i][0] * corr, o1 = acc[i][1] * corr;
#pragma unroll 8
      for (int j = 0; j < kTile; ++j) {
        const float pj = __shfl_sync(0xffffffffu, pr, j);
        const float2 v = *reinterpret_cast<const float2*>(&s_v[j][2 * lane]);
        o0 = fmaf(pj, v.x, o0);
        o1 = fmaf(pj, v.y, o1);
      }
      acc[i][0] = o0, acc[i][1] = o1;
      m[i] = m_new;
    }
  }
  // The sink joins the denominator once: rescale to the common max and divide.
#pragma unroll
  for (int i = 0; i < kMaxHeadsPerWarp; ++i) {
    const int h = warp + i * kWarps;
    if (h >= p.group) break;
    const int head = g * p.group + h;
    float mm = m[i], denom = l[i];
    float scale = 1.0f;
    if (p.a.sinks != nullptr) {
      const float sink = p.a.sinks[head];
      const float m_all = fmaxf(mm, sink);
      scale = expf(mm - m_all);
      denom = denom * scale + expf(sink - m_all);
    }
    const float o0 = acc[i][0] * scale / denom, o1 = acc[i][1] * scale / denom;
    const __nv_bfloat162 hi = __floats2bfloat162_rn(o0, o1);
    const float2 hf = __bfloat1622float2(hi);
    const __nv_bfloat162 lo2 = __floats2bfloat162_rn(o0 - hf.x, o1 - hf.y);
    const size_t at = (size_t(t) * p.num_q_heads + head) * kHeadDim + 2 * lane;
    *reinterpret_cast<__nv_bfloat162*>(p.a.out_hi + at) = hi;
    *reinterpret_cast<__nv_bfloat162*>(p.a.out_lo + at) = lo2;
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
  ORCHID_KERNEL_REQUIRE(group <= kMaxDecodeGroup, "precise attention: more than 64 query heads per KV head");
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
  p.num_q_heads = plan.num_q_heads;
  p.num_kv_heads = plan.num_kv_heads;
  p.group = group;
  p.page_size_log2 = log2_page;
  precise_attention_kernel<<<dim3(unsigned(plan.num_tokens), unsigned(plan.num_kv_heads)), kThreads, 0,
                             stream>>>(p);
  ORCHID_CUDA_CHECK_LAUNCH();
}

}  // namespace orchid::kernels::attention
