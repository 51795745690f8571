#include "kernels/common/tensor_map.h"

#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <string>

#include "kernels/common/cuda_check.h"

namespace orchid::kernels {
namespace {

PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found{};
    ORCHID_CUDA_CHECK(
        cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &found));
    ORCHID_KERNEL_REQUIRE(found == cudaDriverEntryPointSuccess && f != nullptr,
                          "tensor maps: the driver has no cuTensorMapEncodeTiled");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

}  // namespace

CUtensorMap encode_tensor_map(CUtensorMapDataType type, int rank, const void* base, const uint64_t* dims,
                              const uint64_t* strides, const uint32_t* box, CUtensorMapSwizzle swizzle,
                              const char* what) {
  ORCHID_KERNEL_REQUIRE(rank >= 1 && rank <= 5, std::string("tensor maps: bad rank for ") + what);
  CUtensorMap map;
  cuuint64_t d[5];
  cuuint64_t s[4];
  cuuint32_t b[5];
  cuuint32_t e[5];
  for (int i = 0; i < rank; ++i) {
    d[i] = cuuint64_t(dims[i]);
    b[i] = cuuint32_t(box[i]);
    e[i] = 1;
    if (i + 1 < rank) s[i] = cuuint64_t(strides[i]);
  }
  const CUresult r = tensor_map_encoder()(
      &map, type, cuuint32_t(rank), const_cast<void*>(base), d, s, b, e, CU_TENSOR_MAP_INTERLEAVE_NONE,
      swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  ORCHID_KERNEL_REQUIRE(r == CUDA_SUCCESS,
                        std::string("tensor maps: cuTensorMapEncodeTiled failed on ") + what);
  return map;
}

}  // namespace orchid::kernels
