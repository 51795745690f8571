// QKV projection + bias + RoPE + paged KV write for a few tokens (see qkv_rope_gemm.h).
//
// Grid: 4 CTAs per head of the fused QKV weight ((Hq + 2 Hkv) * 4: 320 for gpt-oss, as small_m_gemm's
// ceil(n / 16)); CTA (head, quarter c) streams weight rows 64 head + 8c + g and 64 head + 32 + 8c + g (g < 8)
// through small_m_gemm's main loop (kernels/gemm/small_m_mainloop.cuh): 8 warps splitting k, the tokens as
// the MMAs' n8 side. So lane (g, t) of the summing warp holds dims j = 8c + g and j + 32 of tokens 2t and
// 2t + 1: whole rotation pairs. A ninth warp works out each token's page, slot and cos/sin for the CTA's 8
// dims while the others stream (the step's metadata is on the device before its first kernel, as
// rope_kv_write relies on too), so none of that is on the path after the last weight arrives.
#include "kernels/attention/qkv_rope_gemm.h"

#include "kernels/attention/kv_layout.h"
#include "kernels/common/cuda_check.h"
#include "kernels/common/pdl.cuh"
#include "kernels/gemm/small_m_mainloop.cuh"

namespace orchid::kernels::attention {
namespace {

constexpr int kComputeWarps = small_m::kWarps;
constexpr int kThreads = (kComputeWarps + 1) * 32;  // + the metadata warp
constexpr int kDimsPerCta = 8;                      // dims j0 .. j0 + 7 of a head (and their partners)

struct Params {
  QkvRopeGemmArgs a;
  const AttnSeq* seqs;
  const int32_t* token_seq;
  const int32_t* token_pos;
  int num_tokens;
  int num_q_heads;
  int num_kv_heads;
  int q_stride;
  int page_size_log2;
};

// Two CTAs an SM, as small_m_gemm's 256-thread CTAs have (without the bound the metadata warp's double
// sincospi took the kernel to 122 registers, one CTA an SM; with it 96, no spills).
__global__ void __launch_bounds__(kThreads, 2) qkv_rope_gemm_kernel(const __grid_constant__ Params p) {
  __shared__ float partial[kComputeWarps][4][32];
  __shared__ float s_cos[kQkvRopeGemmMaxTokens][kDimsPerCta], s_sin[kQkvRopeGemmMaxTokens][kDimsPerCta];
  __shared__ int32_t s_page[kQkvRopeGemmMaxTokens], s_slot[kQkvRopeGemmMaxTokens];
  __shared__ bool s_live[kQkvRopeGemmMaxTokens];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int head = blockIdx.x / 4, j0 = (blockIdx.x % 4) * kDimsPerCta;
  const int hq = p.num_q_heads, hkv = p.num_kv_heads;
  const bool rotated = head < hq + hkv;  // q and k heads; v heads are written as they are
  const QkvRopeGemmArgs& a = p.a;
  if (warp == kComputeWarps) {
    // Token r's cos/sin for dim j0 + e (as rope_kv_write computes them), its page and slot.
    for (int i = lane; i < kQkvRopeGemmMaxTokens * kDimsPerCta; i += 32) {
      const int r = i / kDimsPerCta, e = i % kDimsPerCta;
      float c = 1.0f, s = 0.0f;
      if (rotated && r < p.num_tokens && p.token_seq[r] >= 0) {
        const float angle = __fmul_rn(float(p.token_pos[r]), a.rope.inv_freq[j0 + e]);
        double sn, cs;
        sincospi(double(angle) * 0.31830988618379067154, &sn, &cs);  // angle / pi
        c = __fmul_rn(float(cs), a.rope.concentration);
        s = __fmul_rn(float(sn), a.rope.concentration);
      }
      s_cos[r][e] = c;
      s_sin[r][e] = s;
    }
    if (lane < kQkvRopeGemmMaxTokens) {
      const int r = lane;
      const int seq = r < p.num_tokens ? p.token_seq[r] : -1;
      int32_t page = kNoPage;
      int slot = 0;
      if (seq >= 0 && head >= hq) {
        const int pos = p.token_pos[r];
        page = a.page_table[(&p.seqs[seq].table_begin[0])[a.table_kind] + (pos >> p.page_size_log2)];
        slot = pos & ((1 << p.page_size_log2) - 1);
      }
      s_live[r] = seq >= 0;
      s_page[r] = page;
      s_slot[r] = slot;
    }
  } else {
    const int row_a = head * kHeadDim + j0 + g, row_b = row_a + kHeadDim / 2;
    float acc[1][4];
    small_m::accumulate<1>(a.w + int64_t(row_a) * a.hidden + 8 * t, a.w + int64_t(row_b) * a.hidden + 8 * t,
                           true, true, a.x, a.hidden, p.num_tokens, a.hidden, acc);
#pragma unroll
    for (int q = 0; q < 4; ++q) partial[warp][q][lane] = acc[0][q];
  }
  pdl_wait();  // (the metadata warp and warps without k blocks have not waited yet)
  // The attention kernel next requests the cache's older keys before its own wait: let it launch now.
  pdl_launch_dependents();
  __syncthreads();
  if (warp != 0) return;
  // v[q]: dim j (q < 2) or j + 32 (q >= 2) of token 2t + (q & 1), summed over the warps in order.
  float v[4];
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    v[q] = 0.0f;
#pragma unroll
    for (int w2 = 0; w2 < kComputeWarps; ++w2) v[q] += partial[w2][q][lane];
  }
  const int j = j0 + g, col = head * kHeadDim + j;
  const float b1 = a.bias != nullptr ? a.bias[col] : 0.0f;
  const float b2 = a.bias != nullptr ? a.bias[col + kHeadDim / 2] : 0.0f;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = 2 * t + h;
    if (r >= p.num_tokens || !s_live[r]) continue;
    const float x1 = __fadd_rn(v[h], b1), x2 = __fadd_rn(v[2 + h], b2);
    float y1 = x1, y2 = x2;
    if (rotated) {
      const float c = s_cos[r][g], s = s_sin[r][g];
      y1 = __fsub_rn(__fmul_rn(x1, c), __fmul_rn(x2, s));
      y2 = __fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, s));
    }
    __nv_bfloat16* dst;
    if (head < hq) {
      dst = a.q_out + int64_t(r) * p.q_stride + col;
    } else {
      const int32_t page = s_page[r];
      if (page < 0) continue;
      const bool is_k = head < hq + hkv;
      const int kv_head = is_k ? head - hq : head - hq - hkv;
      dst = (is_k ? a.k_pool : a.v_pool) + kv_offset(page, kv_head, s_slot[r], hkv, p.page_size_log2) + j;
    }
    dst[0] = __float2bfloat16_rn(y1);
    dst[kHeadDim / 2] = __float2bfloat16_rn(y2);
  }
}

}  // namespace

bool qkv_rope_gemm_supports(const QkvRopeGemmArgs& a, const AttentionPlan& plan) {
  auto aligned = [](const void* q) { return (reinterpret_cast<uintptr_t>(q) & 15) == 0; };
  return plan.num_tokens >= 1 && plan.num_tokens <= kQkvRopeGemmMaxTokens && a.hidden > 0 &&
         a.hidden % 32 == 0 && aligned(a.x) && aligned(a.w) && log2_exact(a.page_size) >= 0 &&
         plan.num_q_heads > 0 && plan.num_kv_heads > 0 &&
         (a.q_stride == 0 || a.q_stride >= plan.num_q_heads * kHeadDim);
}

void qkv_rope_gemm(const QkvRopeGemmArgs& a, const AttentionPlan& plan, cudaStream_t stream) {
  ORCHID_KERNEL_REQUIRE(qkv_rope_gemm_supports(a, plan), "qkv_rope_gemm: unsupported step or arguments");
  ORCHID_KERNEL_REQUIRE(a.q_out && a.k_pool && a.v_pool && a.page_table, "qkv_rope_gemm: null pointer");
  Params p;
  p.a = a;
  p.seqs = plan.seqs;
  p.token_seq = plan.token_seq;
  p.token_pos = plan.token_pos;
  p.num_tokens = plan.num_tokens;
  p.num_q_heads = plan.num_q_heads;
  p.num_kv_heads = plan.num_kv_heads;
  p.q_stride = a.q_stride ? a.q_stride : plan.num_q_heads * kHeadDim;
  p.page_size_log2 = log2_exact(a.page_size);
  const unsigned grid = unsigned((plan.num_q_heads + 2 * plan.num_kv_heads) * 4);
  launch_pdl(qkv_rope_gemm_kernel, dim3(grid), dim3(kThreads), 0, stream, p);
  ORCHID_CUDA_CHECK_LAUNCH();
}

}  // namespace orchid::kernels::attention
