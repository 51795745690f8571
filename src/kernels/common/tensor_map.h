// TMA tensor maps (the descriptors of cp.async.bulk.tensor), encoded on the host through the driver's
// cuTensorMapEncodeTiled, looked up with the runtime's entry-point query so that nothing links against
// libcuda. Encoding is host work of a few microseconds: launchers encode per launch and pass the maps by
// value as __grid_constant__ kernel parameters (a CUDA graph captures them with the launch).
#pragma once

#include <cuda.h>

#include <cstdint>

namespace orchid::kernels {

// A tiled tensor map of `rank` (1..5) dimensions, innermost first: dims[i] elements, byte strides of
// dims 1.. in strides[0..rank-2], boxes of box[i] elements. Out-of-range elements of a box read as zero.
// Throws orchid::Error naming `what` when the driver refuses the description.
CUtensorMap encode_tensor_map(CUtensorMapDataType type, int rank, const void* base, const uint64_t* dims,
                              const uint64_t* strides, const uint32_t* box, CUtensorMapSwizzle swizzle,
                              const char* what);

}  // namespace orchid::kernels
