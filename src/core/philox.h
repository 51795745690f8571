// Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11): a counter-based
// generator, so the n-th draw of a stream is a pure function of (key, counter) and a GPU kernel computes the
// same bits as the host without carrying state between steps. Known-answer vectors are Random123's.
#pragma once

#include <array>
#include <cstdint>

#include "core/host_device.h"

namespace orchid {

struct Philox4x32 {
  static constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;  // round multipliers
  static constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;  // key schedule (Weyl) increments

  ORCHID_HOST_DEVICE static constexpr std::array<uint32_t, 4> generate(std::array<uint32_t, 4> ctr,
                                                                       std::array<uint32_t, 2> key) {
    for (int round = 0; round < 10; ++round) {
      if (round > 0) {
        key[0] += kW0;
        key[1] += kW1;
      }
      const uint64_t p0 = uint64_t(kM0) * ctr[0];
      const uint64_t p1 = uint64_t(kM1) * ctr[2];
      ctr = {uint32_t(p1 >> 32) ^ ctr[1] ^ key[0], uint32_t(p1), uint32_t(p0 >> 32) ^ ctr[3] ^ key[1],
             uint32_t(p0)};
    }
    return ctr;
  }
};

// The uniform draw of a sampled token: Philox with key = seed and counter = (sample_index, stream, 0, 0),
// 53 bits taken from the first two output words. stream 0 is the token draw; other values are free for
// future per-token randomness. Returns a double in [0, 1).
ORCHID_HOST_DEVICE inline double sampling_uniform(uint64_t seed, uint32_t sample_index, uint32_t stream = 0) {
  const auto r = Philox4x32::generate({sample_index, stream, 0u, 0u}, {uint32_t(seed), uint32_t(seed >> 32)});
  const uint64_t bits = ((uint64_t(r[0]) << 32) | r[1]) >> 11;
  return double(bits) * 0x1.0p-53;
}

}  // namespace orchid
