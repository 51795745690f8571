// Properties of the current device that kernels size themselves by (read once, cached per device).
#pragma once

namespace orchid::kernels {

struct DeviceInfo {
  int device = 0;
  int sm_count = 0;
  int cc_major = 0, cc_minor = 0;
  int max_smem_per_block_optin = 0;
  long long l2_bytes = 0;
  long long global_mem_bytes = 0;
};

constexpr int kMaxDevices = 64;
const DeviceInfo& device_info();  // of the current device

}  // namespace orchid::kernels
