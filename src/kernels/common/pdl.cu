#include <cstdlib>
#include <cstring>

#include "kernels/common/pdl.cuh"

namespace orchid::kernels {

bool pdl_enabled() {
  static const bool enabled = [] {
    const char* v = std::getenv("ORCHID_PDL");
    return !(v && std::strcmp(v, "0") == 0);
  }();
  return enabled;
}

}  // namespace orchid::kernels
