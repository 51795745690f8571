// Compile-time dispatch of a run-time width: a kernel's main loop compiled for each count of tiles it may
// use (the MMA width of a token tile), chosen per CTA with no per-tile branch inside the loop.
#pragma once

#include <type_traits>

namespace orchid::kernels {

// Calls run(std::integral_constant<int, V>{}) with V = v rounded up to a multiple of kStep (clamped to
// kStep..kMax).
template <int kMax, int kStep = 1, int V = kStep, class F>
__device__ __forceinline__ void with_used_tiles(int v, F&& run) {
  if constexpr (V >= kMax) {
    run(std::integral_constant<int, kMax>{});
  } else {
    if (v <= V)
      run(std::integral_constant<int, V>{});
    else
      with_used_tiles<kMax, kStep, V + kStep>(v, run);
  }
}

}  // namespace orchid::kernels
