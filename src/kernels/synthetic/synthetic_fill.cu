#include "kernels/common/cuda_check.h"
#include "kernels/synthetic/synthetic_fill.h"

namespace orchid::kernels {

namespace {

__device__ __forceinline__ uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

__device__ __forceinline__ float normal_from_hash(uint64_t h, float scale, float mean) {
  float s = 0.0f;
#pragma unroll
  for (int k = 0; k < 4; ++k)
    s = __fadd_rn(s, __fmul_rn(float((h >> (16 * k)) & 0xffff) + 0.5f, 1.0f / 65536.0f));
  return __fadd_rn(__fmul_rn(__fsub_rn(s, 2.0f), scale), mean);  // no FMA: the host rounds twice too
}

__device__ __forceinline__ uint16_t float_to_bf16_rne(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);
  return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

__global__ void synthetic_fill_kernel(SyntheticFill f, int64_t begin, int64_t count, void* out) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) {
    const uint64_t h = splitmix64(f.key + uint64_t(begin + i) * 0x9e3779b97f4a7c15ull);
    switch (f.kind) {
      case SyntheticFillKind::kNormalBf16:
        static_cast<uint16_t*>(out)[i] = float_to_bf16_rne(normal_from_hash(h, f.scale, f.mean));
        break;
      case SyntheticFillKind::kNormalF32:
        static_cast<float*>(out)[i] = normal_from_hash(h, f.scale, f.mean);
        break;
      case SyntheticFillKind::kBytes:
        static_cast<uint8_t*>(out)[i] = uint8_t(h >> 56);
        break;
      case SyntheticFillKind::kScales:
        static_cast<uint8_t*>(out)[i] = uint8_t(119 + (h >> 32) % 3);
        break;
    }
  }
}

}  // namespace

void synthetic_fill(const SyntheticFill& f, int64_t begin, int64_t count, void* out, cudaStream_t stream) {
  if (count <= 0) return;
  const int threads = 256;
  const int64_t blocks = (count + threads - 1) / threads;
  synthetic_fill_kernel<<<unsigned(blocks < 65536 ? blocks : 65536), threads, 0, stream>>>(f, begin, count,
                                                                                           out);
  ORCHID_CUDA_CHECK_LAUNCH();
}

}  // namespace orchid::kernels
