// Division by a divisor known only at run time but fixed for a launch, as a multiply-high and a shift
// (Granlund and Montgomery): a kernel dividing item indices by a head count on its critical path otherwise
// runs sm_90's ~20-instruction integer division each time.
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace orchid::kernels {

struct FastDivmod {
  uint32_t divisor = 1, mul = 0, shift = 0;

  FastDivmod() = default;
  // divisor >= 1. Exact for every numerator below 2^31.
  explicit FastDivmod(uint32_t d) : divisor(d) {
    while ((uint64_t(1) << shift) < d) ++shift;
    mul = uint32_t(((uint64_t(1) << 32) * ((uint64_t(1) << shift) - d)) / d + 1);
  }
  ORCHID_HOST_DEVICE uint32_t div(uint32_t n) const {
#ifdef __CUDA_ARCH__
    const uint32_t t = __umulhi(n, mul);
#else
    const uint32_t t = uint32_t((uint64_t(n) * mul) >> 32);
#endif
    return (t + n) >> shift;
  }
  ORCHID_HOST_DEVICE void divmod(uint32_t n, uint32_t& q, uint32_t& r) const {
    q = div(n);
    r = n - q * divisor;
  }
};

}  // namespace orchid::kernels
