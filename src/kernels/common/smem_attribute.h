// Raising a kernel's dynamic shared-memory limit once per device (not at every launch: the call is host
// work, and keeping it out of the launch path keeps launches capture-safe in any stream-capture mode).
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "kernels/common/cuda_check.h"

namespace orchid::kernels {

// `Tag` distinguishes kernels (one flag set per instantiation); devices 0..63.
template <typename Tag, typename Kernel>
void ensure_dynamic_smem(Kernel kernel, int bytes) {
  static std::atomic<uint64_t> done{0};
  int dev = 0;
  ORCHID_CUDA_CHECK(cudaGetDevice(&dev));
  const uint64_t bit = uint64_t(1) << (dev & 63);
  if (done.load(std::memory_order_acquire) & bit) return;
  ORCHID_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  done.fetch_or(bit, std::memory_order_release);
}

}  // namespace orchid::kernels
