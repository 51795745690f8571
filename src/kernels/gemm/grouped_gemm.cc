// Dispatch between the FP8 grouped GEMM configurations (each lives in its own .cu file).
#include "kernels/gemm/grouped_gemm.h"

#include <algorithm>

#include "core/error.h"

namespace orchid::kernels {

namespace grouped_detail {
size_t fp8_coop_workspace_bytes(int groups);
void fp8_coop_run(const GroupedGemmArgs& args, cudaStream_t stream);
size_t fp8_pingpong_workspace_bytes(int groups);
void fp8_pingpong_run(const GroupedGemmArgs& args, cudaStream_t stream);
}  // namespace grouped_detail

size_t grouped_gemm_fp8_workspace_bytes(int num_groups) {
  return std::max(grouped_detail::fp8_coop_workspace_bytes(num_groups),
                  grouped_detail::fp8_pingpong_workspace_bytes(num_groups));
}

void grouped_gemm_fp8_blockwise(const GroupedGemmArgs& args, cudaStream_t stream, Fp8GroupedConfig config) {
  switch (config) {
    case Fp8GroupedConfig::kCooperative128x128:
      grouped_detail::fp8_coop_run(args, stream);
      return;
    case Fp8GroupedConfig::kPingpong64x128:
      grouped_detail::fp8_pingpong_run(args, stream);
      return;
  }
  ORCHID_CHECK(false, "unknown Fp8GroupedConfig {}", int(config));
}

const char* fp8_grouped_config_name(Fp8GroupedConfig config) {
  switch (config) {
    case Fp8GroupedConfig::kCooperative128x128:
      return "coop128x128";
    case Fp8GroupedConfig::kPingpong64x128:
      return "pingpong64x128";
  }
  return "?";
}

}  // namespace orchid::kernels
