// Prefill sink attention, Hopper version: the FA2-style kernel's tiling (128 query rows = tokens x the G
// heads of one KV head, 64-key tiles, 3-stage cp.async ring, swizzled shared memory) with both products on
// wgmma (m64n64k16, A from registers): S = Q K^T with K read by the tensor cores from shared memory through a
// K-major descriptor, O += P V with V through an MN-major (transposed) descriptor. Q fragments and P stay in
// registers, so shared memory serves only the B operands: 2 x 128 B per key per 64 rows, half of what the
// mma.sync kernel reads per FLOP.
//
// Two warpgroups per CTA (64 rows each) and two CTAs per SM: while one warpgroup does its softmax, the
// others keep the tensor cores busy (no producer warp specialisation yet: every thread issues cp.async).
// Each wgmma batch is waited for before its results are used; cp.async data is made visible to the async
// proxy with fence.proxy.async before the barrier that publishes a stage.
//
// Napkin math: same FLOPs and bytes as the mma.sync kernel (prefill_attention.cu). The target is the
// 350 TFLOP/s that the 1.0 s gpt-oss-20b 32k prefill needs; wgmma's dense rate is ~1.5x that of mma.sync.
#include "kernels/attention/kv_layout.h"
#include "kernels/attention/prefill_params.h"
#include "kernels/attention/warp_mma.cuh"
#include "kernels/attention/warpgroup_mma.cuh"
#include "kernels/common/smem_attribute.h"

#include "kernels/common/cuda_check.h"

namespace orchid::kernels::attention::detail {
namespace {

constexpr int kBlockM = kPrefillBlockM;  // 2 warpgroups x 64 rows
constexpr int kBlockN = 64;
constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kStages = 3;
constexpr int kTileBytes = kBlockN * kHeadDim * 2;  // 8 KB, a multiple of the 1 KB swizzle atom
constexpr int kQBytes = kBlockM * kHeadDim * 2;
constexpr int kSmemBytes = kQBytes + 2 * kStages * kTileBytes + 1024;  // + alignment slack
static_assert(kBlockM == kWarps * 16, "each warp owns 16 rows");
struct WgmmaKernelTag;

__global__ void __launch_bounds__(kThreads, 2) prefill_wgmma_kernel(const __grid_constant__ PrefillParams p) {
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  // Swizzle atoms must be 1024-byte aligned for the descriptors.
  const uint32_t raw = smem_addr(smem_raw);
  const uint32_t sQ = (raw + 1023u) & ~1023u;
  uint8_t* smem = smem_raw + (sQ - raw);
  const uint32_t sK = sQ + kQBytes;
  const uint32_t sV = sK + kStages * kTileBytes;
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
  const int32_t* table = p.page_table + (&p.seqs[tile.seq].table_begin[0])[p.table_kind];
  const size_t tok0 = size_t(seq.q_start) + size_t(tile.q0);
  const int hq = p.num_q_heads, hkv = p.num_kv_heads;
  const int ps_mask = (1 << p.page_size_log2) - 1;

  {
    const int chunk = tid & 7;
#pragma unroll
    for (int i = 0; i < kBlockM / 32; ++i) {
      const int r = (tid >> 3) + 32 * i;
      const bool valid = r < rows_valid;
      const int tok = r / G;
      const __nv_bfloat16* src =
          valid ? p.q + ((tok0 + tok) * hq + kvh * G + (r - tok * G)) * kHeadDim + chunk * 8 : p.q;
      cp_async_16(sQ + swz(r, chunk), src, valid);
    }
    cp_async_commit();
  }

  auto load_kv = [&](int j, int stage) {
    const int chunk = tid & 7;
    const uint32_t k_dst = sK + stage * kTileBytes, v_dst = sV + stage * kTileBytes;
#pragma unroll
    for (int i = 0; i < kBlockN / 32; ++i) {
      const int r = (tid >> 3) + 32 * i;
      const int t = j * kBlockN + r;
      int32_t page = kNoPage;
      if (t >= kv_begin && t < kv_end) page = table[t >> p.page_size_log2];
      const bool valid = page >= 0;
      const size_t off =
          valid ? kv_offset(page, kvh, t & ps_mask, hkv, p.page_size_log2) + size_t(chunk) * 8 : 0;
      cp_async_16(k_dst + swz(r, chunk), p.k_pool + off, valid);
      cp_async_16(v_dst + swz(r, chunk), p.v_pool + off, valid);
    }
  };

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < n_tiles) load_kv(j_last - s, s);
    cp_async_commit();
  }

  // This thread's rows: warp * 16 + lane / 4 (h = 0) and + 8 (h = 1).
  int row_pos[2], row_lo[2];
  float m_run[2], l_run[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = warp * 16 + h * 8 + (lane >> 2);
    const int tok = min(r / G, n_tok - 1);
    const int pos = p_first + tok;
    row_pos[h] = pos;
    row_lo[h] = p.window > 0 ? pos - p.window + 1 : 0;
    const int head = kvh * G + (r % G);
    if (p.sinks != nullptr) {
      m_run[h] = p.sinks[head] * 1.4426950408889634f;
      l_run[h] = (lane & 3) == 0 ? 1.0f : 0.0f;
    } else {
      m_run[h] = -INFINITY;
      l_run[h] = 0.0f;
    }
  }
  float o[32];
#pragma unroll
  for (int i = 0; i < 32; ++i) o[i] = 0.0f;

  cp_async_wait<kStages - 1>();
  __syncthreads();
  uint32_t qf[4][4];
#pragma unroll
  for (int ks = 0; ks < 4; ++ks) {
    const int r = warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
    ldmatrix_x4(sQ + swz(r, ks * 2 + (lane >> 4)), qf[ks]);
  }

  for (int it = 0; it < n_tiles; ++it) {
    cp_async_wait<kStages - 2>();
    fence_proxy_async_smem();  // this thread's cp.async data -> visible to wgmma after the barrier
    __syncthreads();           // also: every warpgroup finished (waited for) its wgmmas on the refilled stage
    {
      const int nx = it + kStages - 1;
      if (nx < n_tiles) load_kv(j_last - nx, nx % kStages);
      cp_async_commit();
    }
    const int j = j_last - it;
    const uint32_t kb = sK + (it % kStages) * kTileBytes;
    const uint32_t vb = sV + (it % kStages) * kTileBytes;

    // S = Q K^T: 64 rows (this warpgroup) x 64 keys.
    float s[32];
#pragma unroll
    for (int i = 0; i < 32; ++i) s[i] = 0.0f;
    fence_operands(s);
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < 4; ++ks)
      wgmma_m64n64k16_rs<0>(s, qf[ks], smem_desc_sw128(kb + ks * 32, 16, 1024), ks > 0 ? 1 : 0);
    wgmma_commit();
    wgmma_wait<0>();
    fence_operands(s);

    const int k0 = j * kBlockN;
    const bool need_mask = (k0 + kBlockN - 1 > p_first) || (p.window > 0 && k0 < p_last - p.window + 1);
    if (need_mask) {
#pragma unroll
      for (int nt = 0; nt < 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int t = k0 + nt * 8 + 2 * (lane & 3) + (e & 1);
          const int h = e >> 1;
          if (t > row_pos[h] || t < row_lo[h]) s[nt * 4 + e] = -INFINITY;
        }
    }

#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float mx = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) mx = fmaxf(mx, fmaxf(s[nt * 4 + 2 * h], s[nt * 4 + 2 * h + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m_run[h], mx * p.scale_log2);
      const float m_use = m_new == -INFINITY ? 0.0f : m_new;
      const float alpha = fast_exp2(m_run[h] - m_use);
      m_run[h] = m_new;
      float rs = 0.0f;
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
        for (int e = 2 * h; e < 2 * h + 2; ++e) {
          const float pv = fast_exp2(fmaf(s[nt * 4 + e], p.scale_log2, -m_use));
          s[nt * 4 + e] = pv;
          rs += pv;
        }
      }
      l_run[h] = l_run[h] * alpha + rs;
#pragma unroll
      for (int dt = 0; dt < 8; ++dt) {
        o[dt * 4 + 2 * h] *= alpha;
        o[dt * 4 + 2 * h + 1] *= alpha;
      }
    }

    uint32_t pa[4][4];
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      pa[kk][0] = pack_bf16(s[8 * kk + 0], s[8 * kk + 1]);
      pa[kk][1] = pack_bf16(s[8 * kk + 2], s[8 * kk + 3]);
      pa[kk][2] = pack_bf16(s[8 * kk + 4], s[8 * kk + 5]);
      pa[kk][3] = pack_bf16(s[8 * kk + 6], s[8 * kk + 7]);
    }
    // O += P V: 64 rows x 64 dims, 16 keys per step.
    fence_operands(o);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
      wgmma_m64n64k16_rs<1>(o, pa[kk], smem_desc_sw128(vb + kk * 2048, 1024, 1024), 1);
    wgmma_commit();
    wgmma_wait<0>();
    fence_operands(o);
  }
  cp_async_wait<0>();

  // Normalise; stage the warp's 16 rows in its own part of the Q buffer, then whole-row 16-byte stores.
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float l = l_run[h];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    const int r = warp * 16 + h * 8 + (lane >> 2);
#pragma unroll
    for (int dt = 0; dt < 8; ++dt)
      *reinterpret_cast<uint32_t*>(smem + swz(r, dt) + (lane & 3) * 4) =
          pack_bf16(o[dt * 4 + 2 * h] * inv, o[dt * 4 + 2 * h + 1] * inv);
  }
  __syncwarp();
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int r = warp * 16 + i * 4 + (lane >> 3);
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

void launch_prefill_wgmma(const PrefillParams& p, unsigned blocks, cudaStream_t stream) {
  ensure_dynamic_smem<WgmmaKernelTag>(prefill_wgmma_kernel, kSmemBytes);
  prefill_wgmma_kernel<<<blocks, kThreads, kSmemBytes, stream>>>(p);
  ORCHID_CUDA_CHECK_LAUNCH();
}

}  // namespace orchid::kernels::attention::detail
