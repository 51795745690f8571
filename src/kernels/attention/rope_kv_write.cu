// Napkin math (gpt-oss: Hq 64, Hkv 8, T = 8192): per token 10 KB of qkv read, 8 KB of q and 2 KB of K/V
// written; 164 MB in all = 39 us at 4.17 TB/s. 32 double-precision sincospi per token (shared by all heads).
//
// One CTA (128 threads) per token. Work items: (Hq + Hkv) * 4 rotation items (8 dims j0..j0+7 of the first
// half with their partners j0+32.., two 16-byte loads each) and Hkv * 8 copy items for V (one 16-byte load);
// every global access is 16 bytes.
//
// cos/sin: the fp32 angle is exact input; it is turned into turns (angle / pi, double) so that sincospi
// needs no large-argument reduction (no local memory), and the double results are rounded to fp32 once: the
// same values as cosf/sinf of the fp32 angle to within an ulp, also at 131072-token positions where the fast
// intrinsics would be far off.
#include "kernels/attention/kv_layout.h"
#include "kernels/attention/rope_kv_write.h"

#include <cuda_fp8.h>

#include <type_traits>

#include "kernels/common/cuda_check.h"
#include "kernels/common/pdl.cuh"
#include "kernels/common/quant.cuh"

namespace orchid::kernels::attention {
namespace {

constexpr int kThreads = 128;

template <typename T>
struct RopeParams {
  const T* qkv;
  const void* bias;
  T* q_out;
  void* k_pool;  // T, or e4m3 bytes (kFp8Kv)
  void* v_pool;
  const float* k_scale;
  const float* v_scale;
  int q_stride;
  const int32_t* page_table;
  const AttnSeq* seqs;
  const int32_t* token_seq;
  const int32_t* token_pos;
  RopeTable rope;
  int table_kind;
  int num_q_heads;
  int num_kv_heads;
  int page_size_log2;
};

__device__ __forceinline__ uint4 pack8(const float (&f)[8]) {
  return make_uint4(pack_bf16x2(f[0], f[1]), pack_bf16x2(f[2], f[3]), pack_bf16x2(f[4], f[5]),
                    pack_bf16x2(f[6], f[7]));
}

// Eight consecutive elements of a row as floats, and back (16-byte accesses; two for fp32).
__device__ __forceinline__ void load8(const __nv_bfloat16* p, float (&f)[8]) {
  bf16x8_to_float(*reinterpret_cast<const uint4*>(p), f);
}
__device__ __forceinline__ void load8(const float* p, float (&f)[8]) {
  const float4 a = reinterpret_cast<const float4*>(p)[0], b = reinterpret_cast<const float4*>(p)[1];
  f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
}
__device__ __forceinline__ void store8(__nv_bfloat16* p, const float (&f)[8]) {
  *reinterpret_cast<uint4*>(p) = pack8(f);
}
__device__ __forceinline__ void store8(float* p, const float (&f)[8]) {
  reinterpret_cast<float4*>(p)[0] = make_float4(f[0], f[1], f[2], f[3]);
  reinterpret_cast<float4*>(p)[1] = make_float4(f[4], f[5], f[6], f[7]);
}

// Eight values as e4m3(x / scale) (8 bytes; saturating, round to nearest even).
__device__ __forceinline__ void store8_e4m3(uint8_t* p, const float (&f)[8], float scale) {
  uint32_t w[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    uint32_t lo = __nv_cvt_float2_to_fp8x2(
        make_float2(__fdiv_rn(f[4 * i], scale), __fdiv_rn(f[4 * i + 1], scale)), __NV_SATFINITE, __NV_E4M3);
    uint32_t hi =
        __nv_cvt_float2_to_fp8x2(make_float2(__fdiv_rn(f[4 * i + 2], scale), __fdiv_rn(f[4 * i + 3], scale)),
                                 __NV_SATFINITE, __NV_E4M3);
    w[i] = lo | (hi << 16);
  }
  *reinterpret_cast<uint2*>(p) = make_uint2(w[0], w[1]);
}

// One K or V row piece of 8 values into a pool of the cache's precision.
template <typename T, bool kFp8Kv>
__device__ __forceinline__ void store8_kv(void* pool, size_t at, const float (&f)[8], const float* scale,
                                          int head) {
  if constexpr (kFp8Kv)
    store8_e4m3(static_cast<uint8_t*>(pool) + at, f, scale != nullptr ? scale[head] : 1.0f);
  else
    store8(static_cast<T*>(pool) + at, f);
}

template <bool kBiasFp32>
__device__ __forceinline__ void load_bias8(const void* bias, int col, float (&b)[8]) {
  if (bias == nullptr) {
#pragma unroll
    for (int e = 0; e < 8; ++e) b[e] = 0.0f;
  } else if constexpr (kBiasFp32) {
    const float4 x = reinterpret_cast<const float4*>(static_cast<const float*>(bias) + col)[0];
    const float4 y = reinterpret_cast<const float4*>(static_cast<const float*>(bias) + col)[1];
    b[0] = x.x, b[1] = x.y, b[2] = x.z, b[3] = x.w, b[4] = y.x, b[5] = y.y, b[6] = y.z, b[7] = y.w;
  } else {
    bf16x8_to_float(*reinterpret_cast<const uint4*>(static_cast<const __nv_bfloat16*>(bias) + col), b);
  }
}

template <typename T, bool kBiasFp32, bool kFp8Kv>
__global__ void __launch_bounds__(kThreads) rope_kv_write_kernel(const __grid_constant__ RopeParams<T> p) {
  // The step's metadata (plan, page tables) is copied in before its first kernel, so the token's position,
  // its rotation and its KV page are worked out before the dependency wait (kernels/common/pdl.cuh): a
  // chain of dependent loads and a double-precision sincos off the critical path. Only the qkv row waits.
  const int t = blockIdx.x;
  const int seq_idx = p.token_seq[t];
  __shared__ float s_cos[32], s_sin[32];
  int32_t page = -1;
  int pos = 0;
  if (seq_idx >= 0) {  // else a padding token of a bucket
    pos = p.token_pos[t];
    if (threadIdx.x < 32) {
      const float angle = __fmul_rn(float(pos), p.rope.inv_freq[threadIdx.x]);
      double sn, cs;
      sincospi(double(angle) * 0.31830988618379067154, &sn, &cs);  // angle / pi
      s_cos[threadIdx.x] = __fmul_rn(float(cs), p.rope.concentration);
      s_sin[threadIdx.x] = __fmul_rn(float(sn), p.rope.concentration);
    }
    page = p.page_table[(&p.seqs[seq_idx].table_begin[0])[p.table_kind] + (pos >> p.page_size_log2)];
  }
  pdl_wait();
  // The decode attention kernel (next) requests the cache's older keys before its own wait: let it launch now
  // (every CTA of this one is running by then, so it crowds out nothing of ours).
  pdl_launch_dependents();
  if (seq_idx < 0) return;
  const int slot = pos & ((1 << p.page_size_log2) - 1);
  __syncthreads();

  const int hq = p.num_q_heads, hkv = p.num_kv_heads;
  const int width = (hq + 2 * hkv) * kHeadDim;
  const T* row = p.qkv + size_t(t) * size_t(width);
  const int n_rot = (hq + hkv) * 4;
  const int n_items = n_rot + hkv * 8;
  for (int item = threadIdx.x; item < n_items; item += kThreads) {
    if (item < n_rot) {
      const int head = item >> 2;     // q heads, then k heads (same column order as qkv)
      const int j0 = (item & 3) * 8;  // dims j0..j0+7 pair with j0+32..j0+39
      const int col = head * kHeadDim + j0;
      float x1[8], x2[8], b1[8], b2[8];
      load8(row + col, x1);
      load8(row + col + 32, x2);
      load_bias8<kBiasFp32>(p.bias, col, b1);
      load_bias8<kBiasFp32>(p.bias, col + 32, b2);
      float y1[8], y2[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const float a = __fadd_rn(x1[e], b1[e]);
        const float b = __fadd_rn(x2[e], b2[e]);
        const float c = s_cos[j0 + e], s = s_sin[j0 + e];
        y1[e] = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
        y2[e] = __fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s));
      }
      if (head < hq) {
        T* dst = p.q_out + size_t(t) * size_t(p.q_stride) + size_t(head) * kHeadDim + j0;
        store8(dst, y1);
        store8(dst + 32, y2);
      } else {
        if (page < 0) continue;
        const size_t at = kv_offset(page, head - hq, slot, hkv, p.page_size_log2) + j0;
        store8_kv<T, kFp8Kv>(p.k_pool, at, y1, p.k_scale, head - hq);
        store8_kv<T, kFp8Kv>(p.k_pool, at + 32, y2, p.k_scale, head - hq);
      }
    } else {
      if (page < 0) continue;
      const int v_item = item - n_rot;
      const int kh = v_item >> 3;
      const int c = (v_item & 7) * 8;
      const int col = (hq + hkv + kh) * kHeadDim + c;
      float x[8], b[8];
      load8(row + col, x);
      load_bias8<kBiasFp32>(p.bias, col, b);
#pragma unroll
      for (int e = 0; e < 8; ++e) x[e] = __fadd_rn(x[e], b[e]);
      store8_kv<T, kFp8Kv>(p.v_pool, kv_offset(page, kh, slot, hkv, p.page_size_log2) + c, x, p.v_scale, kh);
    }
  }
}

template <typename T>
void launch(const RopeKvWriteArgs& a, const AttentionPlan& plan, int log2_page, cudaStream_t stream) {
  RopeParams<T> p;
  p.qkv = static_cast<const T*>(a.qkv);
  p.bias = a.bias;
  p.q_out = static_cast<T*>(a.q_out);
  p.q_stride = a.q_stride ? a.q_stride : plan.num_q_heads * kHeadDim;
  p.k_pool = a.k_pool;
  p.v_pool = a.v_pool;
  p.k_scale = a.k_scale;
  p.v_scale = a.v_scale;
  p.page_table = a.page_table;
  p.seqs = plan.seqs;
  p.token_seq = plan.token_seq;
  p.token_pos = plan.token_pos;
  p.rope = a.rope;
  p.table_kind = int(a.table_kind);
  p.num_q_heads = plan.num_q_heads;
  p.num_kv_heads = plan.num_kv_heads;
  p.page_size_log2 = log2_page;
  auto go = [&](auto kernel) { launch_pdl(kernel, dim3(plan.num_tokens), dim3(kThreads), 0, stream, p); };
  if constexpr (std::is_same_v<T, float>) {  // precise layers: fp32 pools
    if (a.bias_fp32)
      go(rope_kv_write_kernel<T, true, false>);
    else
      go(rope_kv_write_kernel<T, false, false>);
  } else if (a.kv_fp8) {
    if (a.bias_fp32)
      go(rope_kv_write_kernel<T, true, true>);
    else
      go(rope_kv_write_kernel<T, false, true>);
  } else {
    if (a.bias_fp32)
      go(rope_kv_write_kernel<T, true, false>);
    else
      go(rope_kv_write_kernel<T, false, false>);
  }
  ORCHID_CUDA_CHECK_LAUNCH();
}

}  // namespace

void rope_kv_write(const RopeKvWriteArgs& a, const AttentionPlan& plan, cudaStream_t stream) {
  const int log2_page = log2_exact(a.page_size);
  ORCHID_KERNEL_REQUIRE(log2_page >= 0, "rope_kv_write: page_size must be a power of two");
  ORCHID_KERNEL_REQUIRE(plan.num_q_heads > 0 && plan.num_kv_heads > 0, "rope_kv_write: plan without heads");
  auto aligned = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; };
  ORCHID_KERNEL_REQUIRE(
      aligned(a.qkv) && aligned(a.bias) && aligned(a.q_out) && aligned(a.k_pool) && aligned(a.v_pool),
      "rope_kv_write: pointers must be 16-byte aligned");
  ORCHID_KERNEL_REQUIRE(a.q_stride == 0 || (a.q_stride >= plan.num_q_heads * kHeadDim && a.q_stride % 8 == 0),
                        "rope_kv_write: q_stride below the row or not a multiple of 8");
  ORCHID_KERNEL_REQUIRE(!(a.fp32 && a.kv_fp8), "rope_kv_write: an FP8 KV cache takes bf16 rows");
  if (plan.num_tokens == 0) return;
  if (a.fp32)
    launch<float>(a, plan, log2_page, stream);
  else
    launch<__nv_bfloat16>(a, plan, log2_page, stream);
}

}  // namespace orchid::kernels::attention
