// Grouped GEMM over experts in the "contiguous" layout, for the MoE expert projections.
//
// Group g owns rows [offsets[g], offsets[g+1]) of A (tokens permuted so each expert's rows are adjacent):
//   D[rows, 0:n] = A[rows, 0:k] · B[g]^T        B[g] is [n, k] row-major (nn.Linear [out, in])
// offsets live on the device (written by the routing kernels), so nothing here syncs with the host and a
// launch is CUDA-graph capturable: the grid is the SM count whatever the split of rows, and the per-group
// pointer arrays are rebuilt on the device by a small set-up kernel before each GEMM. Groups with zero rows
// get no tiles.
//
// Both variants write D in bf16, row-major [M_total, n], without bias: the biases are applied by the
// memory-bound kernel that reads D next (SwiGLU after gate_up, the weighted combine after down).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace orchid::kernels {

struct GroupedGemmArgs {
  int num_groups = 0;            // E
  int n = 0, k = 0;              // per-group output width and contraction length (same for all groups)
  const int* offsets = nullptr;  // device [num_groups + 1], offsets[0] == 0, non-decreasing
  const void* a = nullptr;       // [M_total, k]
  const void* b = nullptr;       // [num_groups, n, k]
  void* d = nullptr;             // [M_total, n] bf16
  // FP8 only (DeepSeek-style block scaling): A per 1x128 group, B per 128x128 block, fp32, K-major:
  const float* a_scale = nullptr;  // [M_total, k/128]
  const float* b_scale = nullptr;  // [num_groups, ceil(n/128), k/128]
  void* workspace = nullptr;       // device, >= the variant's *_workspace_bytes(num_groups), 256-byte aligned
  size_t workspace_bytes = 0;
  // The persistent grid's CTAs (one an SM): 0 = every SM. Fewer leave SMs to a kernel on another stream.
  int max_sms = 0;
};

// FP8 e4m3 x e4m3 -> fp32 accumulate (promoted to fp32 registers every 128 k, scaled per block) -> bf16.
// Requires k % 128 == 0 (pad K with zeros at load), n % 16 == 0, 16-byte aligned a, b, d.
// Two CUTLASS configurations; moe_bench times both on the gpt-oss shapes.
enum class Fp8GroupedConfig : uint8_t {
  kCooperative128x128,  // default
  kPingpong64x128,
};
const char* fp8_grouped_config_name(Fp8GroupedConfig config);
size_t grouped_gemm_fp8_workspace_bytes(int num_groups);  // enough for every configuration
void grouped_gemm_fp8_blockwise(const GroupedGemmArgs& args, cudaStream_t stream,
                                Fp8GroupedConfig config = Fp8GroupedConfig::kCooperative128x128);

// BF16 x BF16 -> fp32 accumulate -> bf16. Requires k % 8 == 0, n % 8 == 0, 16-byte aligned a, b, d.
size_t grouped_gemm_bf16_workspace_bytes(int num_groups);
void grouped_gemm_bf16(const GroupedGemmArgs& args, cudaStream_t stream);

}  // namespace orchid::kernels
