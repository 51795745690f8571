#include "kernels/common/device_info.h"

#include <mutex>

#include "kernels/common/cuda_check.h"

namespace orchid::kernels {

const DeviceInfo& device_info() {
  // A fixed table, not a growing vector: references handed out for one device stay valid when another
  // device is asked for later.
  static std::mutex mu;
  static DeviceInfo cache[kMaxDevices];
  int dev = 0;
  ORCHID_CUDA_CHECK(cudaGetDevice(&dev));
  ORCHID_KERNEL_REQUIRE(dev >= 0 && dev < kMaxDevices, "device_info: device index beyond the table");
  std::lock_guard<std::mutex> lock(mu);
  DeviceInfo& info = cache[dev];
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
