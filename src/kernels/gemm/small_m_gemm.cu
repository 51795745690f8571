// Small-m BF16 GEMM (see small_m_gemm.h).
//
// Napkin math, gpt-oss decode at batch 1: QKV 5120 x 2880 bf16 = 29.5 MB -> 7.1 us at 4.17 TB/s, O 2880 x
// 4096 = 23.6 MB -> 5.7 us, lm_head 201088 x 2880 = 1.16 GB -> 278 us. The FLOPs are 2 per weight per row:
// nothing. So the kernel is a weight stream: many bytes in flight, every SM busy to the end, nothing else in
// the way.
//
// Two kernels, one contract:
// - tile_stream (n >= 8 * SMs, k <= 16 * 8 * 32): one CTA per SM takes a contiguous run of 8-row weight
//   tiles (balanced to within one tile: QKV 640 tiles, 4-5 a CTA), its warps split k (QKV: 15 warps x 6
//   blocks of 32, O: 16 x 8), each warp holds its k slice of x in registers for the whole kernel and streams
//   its slice of tile i + 1 while it multiplies tile i. The weights are the MMA's n8 operand and the (<= 16)
//   rows of x the m16 operand, so a tile is 8 weight rows. The warps' partial sums of a tile meet in shared
//   memory and one warp (in turn) adds them in warp order: deterministic.
// - row_block (everything else, e.g. the router's 32 rows): a CTA of 8 warps owns 16 output features and
//   splits k over its warps, weights as the m16 operand; ceil(n / 16) CTAs.
// Why two: with row_block's 320 QKV CTAs on 132 SMs the last wave runs a fraction of the SMs (and cuBLASLt's
// choice was 2-3x the floor), but row_block is the one that spreads a few rows over enough SMs.
//
// NOTES: the MMA's k order is free as long as A and B agree: lane t takes the 8 consecutive elements 8t..8t+7
// of a 32-block, elements {0,1},{2,3} form k16 step 0 and {4,5},{6,7} step 1, for W and x alike. So both
// operands are plain 16-byte loads in memory order.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "kernels/common/bulk_copy.cuh"
#include "kernels/common/cuda_check.h"
#include "kernels/common/device_info.h"
#include "kernels/common/mma_sync.cuh"
#include "kernels/common/pdl.cuh"
#include "kernels/common/smem_attribute.h"
#include "kernels/gemm/small_m_gemm.h"

namespace orchid::kernels {
namespace {

constexpr int kWarps = 8;
constexpr int kUnroll = 8;  // 32-column blocks in flight per warp

__device__ __forceinline__ uint4 ldg_stream(const void* p) {  // weights: read once, keep out of L1
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// kNT n-tiles of 8 rows of x (m <= 8 * kNT).
template <int kNT, bool kF32Out>
__global__ void __launch_bounds__(kWarps * 32) row_block_kernel(DenseGemmArgs a, int64_t ldx, int64_t ldy) {
  __shared__ float partial[kWarps][kNT][4][32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int n0 = blockIdx.x * 16;
  const int kblocks = a.k / 32;
  const int kb0 = warp * kblocks / kWarps, kb1 = (warp + 1) * kblocks / kWarps;
  const __nv_bfloat16* w = static_cast<const __nv_bfloat16*>(a.w);
  const __nv_bfloat16* x = static_cast<const __nv_bfloat16*>(a.x);
  const bool row_a = n0 + g < a.n, row_b = n0 + g + 8 < a.n;
  const __nv_bfloat16* wa = w + int64_t(row_a ? n0 + g : 0) * a.k + 8 * t;
  const __nv_bfloat16* wb = w + int64_t(row_b ? n0 + g + 8 : 0) * a.k + 8 * t;
  const __nv_bfloat16* xr[kNT];
  bool xv[kNT];
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt) {
    xv[nt] = nt * 8 + g < a.m;
    xr[nt] = x + (xv[nt] ? int64_t(nt * 8 + g) * ldx : 0) + 8 * t;
  }

  float acc[kNT][4];
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.0f;
  const uint4 zero = make_uint4(0, 0, 0, 0);
  // Programmatic dependent launch (kernels/common/pdl.cuh): the weights are no earlier kernel's output, so
  // the first kUnroll blocks of them are requested before waiting for the previous kernel (x is its output).
  for (int kb = kb0; kb < kb1; kb += kUnroll) {
    uint4 A[kUnroll], B[kUnroll], X[kUnroll][kNT];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const bool in = kb + u < kb1;
      const int64_t off = int64_t(kb + u) * 32;
      A[u] = in && row_a ? ldg_stream(wa + off) : zero;
      B[u] = in && row_b ? ldg_stream(wb + off) : zero;
    }
    if (kb == kb0) pdl_wait();
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {  // every load of kUnroll blocks first, then the MMAs
      const bool in = kb + u < kb1;
      const int64_t off = int64_t(kb + u) * 32;
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
        X[u][nt] = in && xv[nt] ? *reinterpret_cast<const uint4*>(xr[nt] + off) : zero;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
        mma_m16n8k16_bf16(acc[nt], A[u].x, B[u].x, A[u].y, B[u].y, X[u][nt].x, X[u][nt].y);
        mma_m16n8k16_bf16(acc[nt], A[u].z, B[u].z, A[u].w, B[u].w, X[u][nt].z, X[u][nt].w);
      }
    }
  }
  pdl_wait();  // (a warp without k blocks has not waited yet; y may still be read by the previous kernel)
  pdl_launch_dependents();  // only the reduction and the stores are left
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
    for (int q = 0; q < 4; ++q) partial[warp][nt][q][lane] = acc[nt][q];
  __syncthreads();
  if (warp != 0) return;
    // acc[nt][q]: feature n0 + g + 8 (q >> 1), x row nt * 8 + 2t + (q & 1); summed over the warps in order.
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      float v = 0.0f;
#pragma unroll
      for (int w2 = 0; w2 < kWarps; ++w2) v += partial[w2][nt][q][lane];
      const int col = n0 + g + 8 * (q >> 1), row = nt * 8 + 2 * t + (q & 1);
      if (col >= a.n || row >= a.m) continue;
      if constexpr (kF32Out) {
        float* y = static_cast<float*>(a.y) + int64_t(row) * ldy + col;
        if (a.bias) v += static_cast<const float*>(a.bias)[col];
        *y = a.accumulate ? *y + v : v;
      } else {
        if (a.bias) v += __bfloat162float(static_cast<const __nv_bfloat16*>(a.bias)[col]);
        static_cast<__nv_bfloat16*>(a.y)[int64_t(row) * ldy + col] = __float2bfloat16_rn(v);
      }
    }
  }
}

constexpr int kStreamTileRows = 8;
constexpr int kStreamMaxWarps = 16;  // consumer warps; one more warp produces
constexpr int kStreamMaxBlocks = 8;  // 32-column blocks of k a warp holds (x in registers)
constexpr int kStreamMaxStages = 8;
constexpr int kStreamSmemBudget = 188 * 1024;  // the tile ring (the partial sums are static, 32 KB)
constexpr int kStreamPartialSlots = 4;         // tiles whose partial sums may wait for their sum

// A weight row in shared memory: 2k bytes padded to 64 mod 128, so the two rows a quarter warp reads (lanes
// g = 2p, 2p + 1, 16 bytes each at 16t) fall on distinct banks.
__host__ __device__ constexpr int stream_row_pitch(int k) {
  return (2 * k + 127) / 128 * 128 + 64;
}

// One CTA per SM: tiles [t0, t1) of 8 weight rows, streamed through a ring of `stages` tiles by the last warp
// (bulk copies, one per row); consumer warp w multiplies the k blocks [w * nb, (w + 1) * nb) of each tile.
template <bool kM16, bool kF32Out>
__global__ void __launch_bounds__((kStreamMaxWarps + 2) * 32, 1)
    tile_stream_kernel(DenseGemmArgs a, int64_t ldx, int64_t ldy, int nb, int stages, uint32_t piece,
                       int pitch) {
  extern __shared__ __align__(128) uint8_t ring[];
  __shared__ float partial[kStreamPartialSlots][kStreamMaxWarps][4][32];
  __shared__ uint64_t full[kStreamMaxStages], empty[kStreamMaxStages];
  __shared__ uint64_t pfull[kStreamPartialSlots], pempty[kStreamPartialSlots];
  const int consumers = blockDim.x / 32 - 2;  // then the producer warp, then the summing warp
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int tiles = (a.n + kStreamTileRows - 1) / kStreamTileRows;
  const int t0 = int(int64_t(blockIdx.x) * tiles / gridDim.x);
  const int t1 = int(int64_t(blockIdx.x + 1) * tiles / gridDim.x);
  const int stage_bytes = kStreamTileRows * pitch;
  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], uint32_t(consumers));
    }
    for (int s = 0; s < kStreamPartialSlots; ++s) {
      mbar_init(&pfull[s], uint32_t(consumers * 32));  // every consumer lane has written its partial
      mbar_init(&pempty[s], 32);                       // the summing warp has read them
    }
    mbar_init_fence();
  }
  __syncthreads();

  if (warp == consumers) {  // the producer: the weights are no earlier kernel's output, so no pdl_wait
    if (lane != 0) return;
    const uint8_t* w = static_cast<const uint8_t*>(a.w);
    const uint32_t row_bytes = uint32_t(2 * a.k);
    for (int tile = t0; tile < t1; ++tile) {
      const int i = tile - t0, s = i % stages;
      if (i >= stages) mbar_wait(&empty[s], uint32_t(i / stages - 1) & 1u);
      const int row0 = tile * kStreamTileRows, rows = min(kStreamTileRows, a.n - row0);
      mbar_arrive_expect_tx(&full[s], uint32_t(rows) * row_bytes);
      if (pitch == int(row_bytes)) {  // unpadded rows: the tile is one contiguous range
        const uint32_t bytes = uint32_t(rows) * row_bytes;
        for (uint32_t off = 0; off < bytes; off += piece)
          bulk_copy_g2s(ring + s * stage_bytes + off, w + int64_t(row0) * row_bytes + off,
                        min(piece, bytes - off), &full[s]);
        continue;
      }
      for (int r = 0; r < rows; ++r)  // rows past n are not copied: their MMA columns are never stored
        for (uint32_t off = 0; off < row_bytes; off += piece)
          bulk_copy_g2s(ring + s * stage_bytes + r * pitch + off, w + int64_t(row0 + r) * row_bytes + off,
                        min(piece, row_bytes - off), &full[s]);
    }
    return;
  }

  if (warp == consumers + 1) {  // the summing warp: tile i's partials, in warp order, once all are in
    pdl_wait();                 // y may still be read by the previous kernel
    for (int tile = t0; tile < t1; ++tile) {
      const int i = tile - t0, slot = i % kStreamPartialSlots, use = i / kStreamPartialSlots;
      mbar_wait(&pfull[slot], uint32_t(use) & 1u);
      // partial[slot][w][q][lane]: x row g + 8 (q >> 1), feature tile * 8 + 2t + (q & 1)
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        float v = 0.0f;
        for (int w2 = 0; w2 < consumers; ++w2) v += partial[slot][w2][q][lane];
        const int row = g + 8 * (q >> 1), col = tile * kStreamTileRows + 2 * t + (q & 1);
        if (col >= a.n || row >= a.m) continue;
        if constexpr (kF32Out) {
          float* y = static_cast<float*>(a.y) + int64_t(row) * ldy + col;
          if (a.bias) v += static_cast<const float*>(a.bias)[col];
          *y = a.accumulate ? *y + v : v;
        } else {
          if (a.bias) v += __bfloat162float(static_cast<const __nv_bfloat16*>(a.bias)[col]);
          static_cast<__nv_bfloat16*>(a.y)[int64_t(row) * ldy + col] = __float2bfloat16_rn(v);
        }
      }
      mbar_arrive(&pempty[slot]);
    }
    pdl_launch_dependents();
    return;
  }

  const int kblocks = a.k / 32;
  const int kb0 = warp * nb;  // this warp's first k block
  bool kin[kStreamMaxBlocks];
#pragma unroll
  for (int j = 0; j < kStreamMaxBlocks; ++j) kin[j] = j < nb && kb0 + j < kblocks;  // warp-uniform
  const uint4 zero = make_uint4(0, 0, 0, 0);
  pdl_wait();  // x is the previous kernel's output (kernels/common/pdl.cuh)
  uint4 xa[kStreamMaxBlocks], xb[kStreamMaxBlocks];  // rows g and g + 8 of x, this warp's k slice
  {
    const __nv_bfloat16* x = static_cast<const __nv_bfloat16*>(a.x);
    const __nv_bfloat16* pa = x + int64_t(g < a.m ? g : 0) * ldx + kb0 * 32 + 8 * t;
    const __nv_bfloat16* pb = x + int64_t(g + 8 < a.m ? g + 8 : 0) * ldx + kb0 * 32 + 8 * t;
#pragma unroll
    for (int j = 0; j < kStreamMaxBlocks; ++j) {
      xa[j] = kin[j] && g < a.m ? *reinterpret_cast<const uint4*>(pa + j * 32) : zero;
      xb[j] = kM16 && kin[j] && g + 8 < a.m ? *reinterpret_cast<const uint4*>(pb + j * 32) : zero;
    }
  }
  const int lane_off = g * pitch + kb0 * 64 + 16 * t;
  for (int tile = t0; tile < t1; ++tile) {
    const int i = tile - t0, s = i % stages;
    mbar_wait(&full[s], uint32_t(i / stages) & 1u);
    const uint8_t* st = ring + s * stage_bytes + lane_off;
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int j = 0; j < kStreamMaxBlocks; ++j) {
      if (!kin[j]) continue;
      const uint4 v = *reinterpret_cast<const uint4*>(st + j * 64);
      // A = x (rows g, g + 8), B = the 8 weight rows (column g = weight row g of the tile)
      mma_m16n8k16_bf16(acc, xa[j].x, xb[j].x, xa[j].y, xb[j].y, v.x, v.y);
      mma_m16n8k16_bf16(acc, xa[j].z, xb[j].z, xa[j].w, xb[j].w, v.z, v.w);
    }
    __syncwarp();
    if (lane == 0) mbar_arrive(&empty[s]);  // this warp is done with the stage
    // The partials of tile i wait in slot i % kStreamPartialSlots for the summing warp: no barrier of the
    // consumers per tile, only a wait for the slot's previous sum, kStreamPartialSlots tiles back.
    const int slot = i % kStreamPartialSlots, use = i / kStreamPartialSlots;
    if (use > 0) mbar_wait(&pempty[slot], uint32_t(use - 1) & 1u);
#pragma unroll
    for (int q = 0; q < 4; ++q) partial[slot][warp][q][lane] = acc[q];
    mbar_arrive(&pfull[slot]);
  }
  pdl_launch_dependents();
}

struct StreamShape {
  int consumers = 0, nb = 0, stages = 0;
  uint32_t piece = 0;  // bytes per bulk copy (a multiple of 16)
  int pitch = 0;       // bytes between weight rows in shared memory
};

// ORCHID_STREAM=sSpPuU (stages S, copies of P bytes, U = 1: unpadded rows; 0 = the default) for measuring
// the ring's shape.
struct ForcedStream {
  int stages = 0, piece = 0, unpadded = 0;
};
ForcedStream forced_stream() {
  static const ForcedStream f = [] {
    ForcedStream v;
    if (const char* e = std::getenv("ORCHID_STREAM"))
      std::sscanf(e, "s%dp%du%d", &v.stages, &v.piece, &v.unpadded);
    v.piece = v.piece / 16 * 16;
    return v;
  }();
  return f;
}

// The tile_stream shape for a call, or false when it does not apply (few rows: row_block spreads them).
bool tile_stream_shape(const DenseGemmArgs& a, StreamShape* sh) {
  const int kblocks = a.k / 32;
  const int tiles = (a.n + kStreamTileRows - 1) / kStreamTileRows;
  if (tiles < device_info().sm_count || kblocks > kStreamMaxWarps * kStreamMaxBlocks) return false;
  sh->nb = (kblocks + kStreamMaxWarps - 1) / kStreamMaxWarps;
  sh->consumers = (kblocks + sh->nb - 1) / sh->nb;
  const ForcedStream f = forced_stream();
  sh->pitch = f.unpadded ? 2 * a.k : stream_row_pitch(a.k);
  sh->stages = std::min(kStreamMaxStages, kStreamSmemBudget / (kStreamTileRows * sh->pitch));
  sh->piece = uint32_t(2 * a.k);
  if (f.stages > 0) sh->stages = std::min(sh->stages, f.stages);
  if (f.piece > 0) sh->piece = uint32_t(f.piece);
  return sh->stages >= 2;
}

template <bool kM16, bool kF32Out>
struct TileStreamTag {};

template <bool kM16, bool kF32Out>
void launch_tile_stream(const DenseGemmArgs& a, int64_t ldx, int64_t ldy, const StreamShape& sh,
                        cudaStream_t stream) {
  const int tiles = (a.n + kStreamTileRows - 1) / kStreamTileRows;
  const dim3 grid(unsigned(std::min(tiles, device_info().sm_count))),
      block(unsigned((sh.consumers + 2) * 32));
  const size_t bytes = size_t(sh.stages) * kStreamTileRows * sh.pitch;
  auto kernel = tile_stream_kernel<kM16, kF32Out>;
  ensure_dynamic_smem<TileStreamTag<kM16, kF32Out>>(kernel, kStreamSmemBudget);
  launch_pdl(kernel, grid, block, bytes, stream, a, ldx, ldy, sh.nb, sh.stages, sh.piece, sh.pitch);
}

void launch_tile_stream(const DenseGemmArgs& a, int64_t ldx, int64_t ldy, const StreamShape& sh,
                        cudaStream_t stream) {
  const bool m16 = a.m > 8, f32 = a.out == GemmOut::kF32;
  if (m16 && f32) return launch_tile_stream<true, true>(a, ldx, ldy, sh, stream);
  if (m16) return launch_tile_stream<true, false>(a, ldx, ldy, sh, stream);
  if (f32) return launch_tile_stream<false, true>(a, ldx, ldy, sh, stream);
  launch_tile_stream<false, false>(a, ldx, ldy, sh, stream);
}

template <int kNT>
void launch_row_block(const DenseGemmArgs& a, int64_t ldx, int64_t ldy, cudaStream_t stream) {
  const unsigned grid = unsigned((a.n + 15) / 16);
  if (a.out == GemmOut::kF32)
    launch_pdl(row_block_kernel<kNT, true>, dim3(grid), dim3(kWarps * 32), 0, stream, a, ldx, ldy);
  else
    launch_pdl(row_block_kernel<kNT, false>, dim3(grid), dim3(kWarps * 32), 0, stream, a, ldx, ldy);
}

}  // namespace

bool small_m_gemm_supports(const DenseGemmArgs& a) {
  const int64_t ldx = a.ldx ? a.ldx : a.k;
  return a.m >= 1 && a.m <= kSmallMGemmMaxRows && a.k % 32 == 0 && a.n >= 1 && ldx % 8 == 0 &&
         (reinterpret_cast<uintptr_t>(a.x) | reinterpret_cast<uintptr_t>(a.w)) % 16 == 0;
}

void small_m_gemm(const DenseGemmArgs& a, cudaStream_t stream) {
  ORCHID_KERNEL_REQUIRE(small_m_gemm_supports(a), "small_m_gemm: unsupported shape or alignment");
  ORCHID_KERNEL_REQUIRE(!a.accumulate || a.out == GemmOut::kF32,
                        "small_m_gemm: accumulate needs fp32 output");
  const int64_t ldx = a.ldx ? a.ldx : a.k, ldy = a.ldy ? a.ldy : a.n;
  StreamShape sh;
  if (tile_stream_shape(a, &sh)) {
    launch_tile_stream(a, ldx, ldy, sh, stream);
  } else if (a.m <= 8) {
    launch_row_block<1>(a, ldx, ldy, stream);
  } else {
    launch_row_block<2>(a, ldx, ldy, stream);
  }
}

}  // namespace orchid::kernels
