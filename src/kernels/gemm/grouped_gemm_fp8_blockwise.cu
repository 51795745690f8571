// FP8 blockwise grouped GEMM, cooperative schedule: CTA tile 128x128x128, two consumer warpgroups of 64x128.
// The default configuration (see grouped_gemm.h); variants are compared by moe_bench.
//
// Napkin math (gpt-oss-20b prefill, 8192 tokens, E=32, top-4 -> ~1024 rows per expert):
//   gate_up: 2 * 32768 * 5760 * 2944 = 1.11 TFLOP -> 0.83 ms at the measured 1332 TFLOP/s FP8 ceiling;
//   down:    2 * 32768 * 2880 * 2944 = 0.56 TFLOP -> 0.42 ms. 8 x 45 = 360 tiles per expert (gate_up).
#include "kernels/gemm/grouped_gemm_cutlass.cuh"
#include "kernels/gemm/grouped_gemm_fp8_kernel.cuh"

namespace orchid::kernels {

namespace grouped_detail {
using Fp8Coop = Fp8GroupedGemm<cute::Shape<cute::_128, cute::_128, cute::_128>,
                               cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperativeFP8Blockwise,
                               cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative>::Gemm;
size_t fp8_coop_workspace_bytes(int groups) {
  return workspace_bytes<Fp8Coop, true>(groups);
}
void fp8_coop_run(const GroupedGemmArgs& args, cudaStream_t stream) {
  run<Fp8Coop, true, 1>(args, stream);
}
}  // namespace grouped_detail

}  // namespace orchid::kernels
