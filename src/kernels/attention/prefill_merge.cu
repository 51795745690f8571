// The merge of split prefill tiles (PlanOptions::balance_prefill): a split tile's pieces each wrote, per KV
// head and query row, an unnormalised O and its (max, sum) in the log2 domain, the sink's term in the first
// piece's sum only. The row's result is sum_j 2^(m_j - M) O_j / sum_j 2^(m_j - M) l_j with M = max_j m_j.
//
// Eight threads a row, eight dimensions each (two 16-byte loads a piece), one 16-byte bf16 store.
#include "kernels/attention/kv_layout.h"
#include "kernels/attention/prefill_params.h"
#include "kernels/attention/warp_mma.cuh"
#include "kernels/common/cuda_check.h"

namespace orchid::kernels::attention::detail {
namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads)
    prefill_merge_kernel(const __grid_constant__ PrefillParams p, const int32_t* split_tiles,
                         int64_t rows_total) {
  const int64_t gid = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  const int64_t row = gid >> 3;
  const int chunk = int(gid & 7);
  if (row >= rows_total) return;
  const int G = p.group;
  const int rows = p.tokens_per_tile * G;
  const int64_t per_tile = int64_t(p.num_kv_heads) * rows;
  const int k = int(row / per_tile);
  const int kvh = int(row % per_tile) / rows, r = int(row % per_tile) % rows;
  const PrefillPiece first = p.pieces[split_tiles[k]];
  const AttnSeq seq = p.seqs[first.seq];
  const int tok = r / G;
  if (tok >= min(p.tokens_per_tile, seq.num_q - first.q0)) return;  // a partial tile's padding rows
  const size_t stride = size_t(prefill_partial_floats(rows));
  auto part = [&](int j) {
    return p.partial + size_t(first.slot + j) * p.num_kv_heads * stride + kvh * stride;
  };
  float m = -INFINITY;
  for (int j = 0; j < first.pieces; ++j) m = fmaxf(m, part(j)[rows * kHeadDim + 2 * r]);
  float acc[8] = {}, l = 0.0f;
  if (m != -INFINITY) {
    for (int j = 0; j < first.pieces; ++j) {
      const float* pj = part(j);
      const float w = exp2f(pj[rows * kHeadDim + 2 * r] - m);
      l += w * pj[rows * kHeadDim + 2 * r + 1];
      const float4 a = *reinterpret_cast<const float4*>(pj + r * kHeadDim + chunk * 8);
      const float4 b = *reinterpret_cast<const float4*>(pj + r * kHeadDim + chunk * 8 + 4);
      acc[0] += w * a.x, acc[1] += w * a.y, acc[2] += w * a.z, acc[3] += w * a.w;
      acc[4] += w * b.x, acc[5] += w * b.y, acc[6] += w * b.z, acc[7] += w * b.w;
    }
  }
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
  const uint4 v = make_uint4(pack_bf16(acc[0] * inv, acc[1] * inv), pack_bf16(acc[2] * inv, acc[3] * inv),
                             pack_bf16(acc[4] * inv, acc[5] * inv), pack_bf16(acc[6] * inv, acc[7] * inv));
  const size_t out_row = size_t(seq.q_start + first.q0 + tok) * p.num_q_heads + kvh * G + (r - tok * G);
  *reinterpret_cast<uint4*>(p.out + out_row * kHeadDim + chunk * 8) = v;
}

}  // namespace

void launch_prefill_merge(const PrefillParams& p, const int32_t* split_tiles, int num_split_tiles,
                          cudaStream_t stream) {
  if (num_split_tiles <= 0) return;
  const int64_t rows_total = int64_t(num_split_tiles) * p.num_kv_heads * p.tokens_per_tile * p.group;
  const int64_t blocks = (rows_total * 8 + kThreads - 1) / kThreads;
  prefill_merge_kernel<<<unsigned(blocks), kThreads, 0, stream>>>(p, split_tiles, rows_total);
  ORCHID_CUDA_CHECK_LAUNCH();
}

}  // namespace orchid::kernels::attention::detail
