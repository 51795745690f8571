#include "kernels/common/device_info.h"

#include <mutex>
#include <vector>

#include "kernels/common/cuda_check.h"

namespace orchid::kernels {

const DeviceInfo& device_info() {
  static std::mutex mu;
  static std::vector<DeviceInfo> cache;
  int dev = 0;
  ORCHID_CUDA_CHECK(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lock(mu);
  if (int(cache.size()) <= dev) cache.resize(size_t(dev) + 1);
  DeviceInfo& info = cache[size_t(dev)];
  if (info.sm_count == 0) {
    cudaDeviceProp p{};
    ORCHID_CUDA_CHECK(cudaGetDeviceProperties(&p, dev));
    info.device = dev;
    info.sm_count = p.multiProcessorCount;
    info.cc_major = p.major;
    info.cc_minor = p.minor;
    info.max_smem_per_block_optin = int(p.sharedMemPerBlockOptin);
    info.l2_bytes = p.l2CacheSize;
    info.global_mem_bytes = (long long)p.totalGlobalMem;
  }
  return info;
}

}  // namespace orchid::kernels
