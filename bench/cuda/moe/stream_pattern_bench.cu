// Where the one-token MXFP4 expert stream loses its bandwidth: the streaming GEMM's memory pattern alone.
//
// The streaming kernel at one token (mxfp4_gemm.cu, gpt-oss-20b gate_up: 360 CTAs of 4 warps, each warp 23
// kilobyte chunks through a cp.async ring of 4) reaches ~1.6 TB/s on an H100, and neither fewer
// instructions nor more requests in flight (deeper rings, k splits, L2 prefetches) made it faster
// (bench/RESULTS.md, 2026-12-07). This kernel keeps the grid, the warps, the ring and the copies and drops
// the GEMM: per chunk a warp waits for its copies, reads its 32 bytes a lane back and spends `work` integer
// operations on them. What it varies:
//   layout   chunk-major: chunk c of warp w at (c * warps + w) KB, the repacked experts' order (every warp
//            reads chunk column c at about the same time); warp-major: at (w * chunks + c) KB (each warp
//            reads one contiguous run);
//   spread   the same two orders inside a tensor of 32 or 128 experts of which 4 are read, as the GEMM
//            reads them: repacked, each chunk column holds every expert's groups, so a launch reads 4
//            runs of 360 KB in each of 23 columns 11.5 MB (32 experts) or 46 MB (128) apart;
//   stages   the ring's depth (stages - 1 chunks in flight a warp);
//   work     operations a chunk (the GEMM spends ~190 instructions on one);
//   ctas     the grid (360: 20b's gate_up at one token; 720: twice the warps).
// So: if warp-major is much faster than chunk-major at work 0, the layout is the limit; if both are near the
// HBM rate at work 0 and fall with work, the warps' instruction chains are.
//
//   stream_pattern_bench [--quick]   (--quick: ring 4, 360 CTAs, no work, and the spread rows)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "kernels/common/cuda_check.h"
#include "kernels/moe/mxfp4_mma.cuh"  // the streaming kernel's cp.async helpers

namespace {

using orchid::kernels::mxfp4_detail::cp_async_16;
using orchid::kernels::mxfp4_detail::cp_async_commit;
using orchid::kernels::mxfp4_detail::cp_async_wait;

constexpr int kWarps = 4, kChunkBytes = 1024, kChunks = 23;
constexpr size_t kRotateBytes = size_t(256) << 20;  // several copies past the L2: every repetition reads cold

// Where the grid's warps read from. experts == 0: one contiguous run of warps * kChunks kilobytes. Else the
// repacked experts' tensor of `experts` experts of `warps / 4` groups, of which the grid reads 4 (`active`):
// chunk-major as repacked ([chunk][expert][group], the chunk columns experts * groups KB apart), or
// warp-major ([expert][group][chunk]).
struct Spread {
  int experts = 0;
  int active[4] = {0, 0, 0, 0};
};

// One warp streams kChunks chunks of its own through a ring of kStages; `work` integer operations (8
// independent chains) a chunk stand in for the GEMM. out gets one word a warp (nothing is optimised away).
template <int kStages, bool kWarpMajor>
__global__ void __launch_bounds__(kWarps * 32)
    stream_kernel(const uint8_t* src, int work, Spread spread, uint32_t* out) {
  __shared__ __align__(16) uint8_t ring[kWarps][kStages][kChunkBytes];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t w = int64_t(blockIdx.x) * kWarps + warp, warps = int64_t(gridDim.x) * kWarps;
  const int64_t per = warps / 4, group = w % per;
  const int64_t e = spread.active[min(int(w / per), 3)], E = spread.experts;
  auto chunk_at = [&](int c) {
    int64_t kb;
    if (E == 0)
      kb = kWarpMajor ? w * kChunks + c : int64_t(c) * warps + w;
    else
      kb = kWarpMajor ? (e * per + group) * kChunks + c : (int64_t(c) * E + e) * per + group;
    return src + kb * kChunkBytes + lane * 16;
  };
  auto issue = [&](int c) {
    if (c < kChunks) {
      uint8_t* st = &ring[warp][c % kStages][lane * 16];
      cp_async_16(st, chunk_at(c), true);
      cp_async_16(st + 512, chunk_at(c) + 512, true);
    }
    cp_async_commit();
  };
#pragma unroll
  for (int c = 0; c < kStages - 1; ++c) issue(c);
  uint32_t acc[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  for (int c = 0; c < kChunks; ++c) {
    issue(c + kStages - 1);
    cp_async_wait<kStages - 1>();
    __syncwarp();
    const uint8_t* st = &ring[warp][c % kStages][lane * 16];
    const uint4 a = *reinterpret_cast<const uint4*>(st), b = *reinterpret_cast<const uint4*>(st + 512);
    acc[0] ^= a.x, acc[1] ^= a.y, acc[2] ^= a.z, acc[3] ^= a.w, acc[4] ^= b.x, acc[5] ^= b.y, acc[6] ^= b.z,
        acc[7] ^= b.w;
    for (int i = 0; i < work; i += 8) {
#pragma unroll
      for (int j = 0; j < 8; ++j) acc[j] = acc[j] * 1664525u + 1013904223u;
    }
    __syncwarp();  // the stage is free for the copy issued next
  }
  uint32_t v = 0;
#pragma unroll
  for (int j = 0; j < 8; ++j) v ^= acc[j];
  for (int o = 16; o > 0; o /= 2) v ^= __shfl_xor_sync(0xffffffffu, v, o);
  if (lane == 0) out[w] = v;
}

// The same grid doing nothing: the launch and event overhead inside every row's time.
__global__ void __launch_bounds__(kWarps * 32) empty_kernel(uint32_t* out) {
  if (out == nullptr) out[threadIdx.x] = 0;  // never taken; keeps the launch from being elided
}

template <typename Launch>
float median_us(Launch launch) {
  for (int i = 0; i < 3; ++i) launch(i);
  constexpr int kReps = 21;
  std::vector<cudaEvent_t> ev(2 * kReps);
  for (auto& e : ev) ORCHID_CUDA_CHECK(cudaEventCreate(&e));
  for (int i = 0; i < kReps; ++i) {
    ORCHID_CUDA_CHECK(cudaEventRecord(ev[2 * i]));
    launch(3 + i);
    ORCHID_CUDA_CHECK(cudaEventRecord(ev[2 * i + 1]));
  }
  ORCHID_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> ms(kReps);
  for (int i = 0; i < kReps; ++i) ORCHID_CUDA_CHECK(cudaEventElapsedTime(&ms[i], ev[2 * i], ev[2 * i + 1]));
  for (auto& e : ev) ORCHID_CUDA_CHECK(cudaEventDestroy(e));
  std::sort(ms.begin(), ms.end());
  return 1000.0f * ms[kReps / 2];
}

template <int kStages, bool kWarpMajor>
float time_us(const uint8_t* buf, size_t copy_bytes, int copies, int ctas, int work, uint32_t* out) {
  return median_us([&](int i) {
    stream_kernel<kStages, kWarpMajor>
        <<<ctas, kWarps * 32>>>(buf + size_t(i % copies) * copy_bytes, work, Spread{}, out);
  });
}

template <int kStages>
void row(const uint8_t* buf, int ctas, int work, uint32_t* out) {
  const size_t bytes = size_t(ctas) * kWarps * kChunks * kChunkBytes;
  const int copies = int(std::max<size_t>(1, kRotateBytes / bytes));
  for (const bool warp_major : {false, true}) {
    const float us = warp_major ? time_us<kStages, true>(buf, bytes, copies, ctas, work, out)
                                : time_us<kStages, false>(buf, bytes, copies, ctas, work, out);
    std::printf("%-12s stages %d  ctas %4d  work %4d  %8.2f us  %6.2f TB/s\n",
                warp_major ? "warp-major" : "chunk-major", kStages, ctas, work, us,
                bytes / (us * 1e-6) / 1e12);
    std::fflush(stdout);
  }
}

// 4 of `experts` experts, as a one-token gate_up reads them (360 CTAs: 360 groups an expert): experts a
// quarter of the tensor apart, shifted by one each repetition, so that a set comes back only after
// experts / 4 - 1 others (at least 7 x 33 MB) and every repetition reads cold bytes.
void spread_row(const uint8_t* buf, int experts, uint32_t* out) {
  constexpr int kCtas = 360;
  const size_t bytes = size_t(kCtas) * kWarps * kChunks * kChunkBytes;  // what one launch reads
  for (const bool warp_major : {false, true}) {
    const float us = median_us([&](int i) {
      Spread sp;
      sp.experts = experts;
      for (int j = 0; j < 4; ++j) sp.active[j] = i % (experts / 4) + j * (experts / 4);
      if (warp_major)
        stream_kernel<4, true><<<kCtas, kWarps * 32>>>(buf, 0, sp, out);
      else
        stream_kernel<4, false><<<kCtas, kWarps * 32>>>(buf, 0, sp, out);
    });
    std::printf("%-12s stages 4  ctas  360  work    0  4 of %3d experts  %8.2f us  %6.2f TB/s\n",
                warp_major ? "warp-major" : "chunk-major", experts, us, bytes / (us * 1e-6) / 1e12);
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  uint8_t* buf = nullptr;
  uint32_t* out = nullptr;
  ORCHID_CUDA_CHECK(cudaMalloc(&buf, kRotateBytes + (size_t(64) << 20)));
  ORCHID_CUDA_CHECK(cudaMemset(buf, 0x5a, kRotateBytes + (size_t(64) << 20)));
  ORCHID_CUDA_CHECK(cudaMalloc(&out, size_t(4096) * kWarps * 4));
  for (const int ctas : {360, 720})
    std::printf("empty kernel ctas %4d  %8.2f us\n", ctas,
                median_us([&](int) { empty_kernel<<<ctas, kWarps * 32>>>(out); }));
  for (const int ctas : {360, 720}) {
    for (const int work : {0, 64, 192}) {
      if (quick && (ctas != 360 || work != 0)) continue;
      if (!quick) row<2>(buf, ctas, work, out);
      row<4>(buf, ctas, work, out);
      if (!quick) row<8>(buf, ctas, work, out);
    }
  }
  ORCHID_CUDA_CHECK(cudaFree(buf));
  // The experts' tensor as the GEMM reads it: 4 experts' runs inside every chunk column.
  for (const int experts : {32, 128}) {
    const size_t tensor = size_t(experts) * (kWarps * 360 / 4) * kChunks * kChunkBytes;
    ORCHID_CUDA_CHECK(cudaMalloc(&buf, tensor));
    ORCHID_CUDA_CHECK(cudaMemset(buf, 0x5a, tensor));
    spread_row(buf, experts, out);
    ORCHID_CUDA_CHECK(cudaFree(buf));
  }
  ORCHID_CUDA_CHECK(cudaFree(out));
  return 0;
}
