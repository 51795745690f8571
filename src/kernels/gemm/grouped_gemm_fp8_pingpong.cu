// FP8 blockwise grouped GEMM, ping-pong schedule: CTA tile 64x128x128, the two consumer warpgroups work on
// different tiles so one's epilogue overlaps the other's MMAs. Finer M tiles waste less on the ragged
// per-expert row counts (on average 32 rows per expert instead of 64).
#include "kernels/gemm/grouped_gemm_cutlass.cuh"
#include "kernels/gemm/grouped_gemm_fp8_kernel.cuh"

namespace orchid::kernels {

namespace grouped_detail {
using Fp8Pingpong = Fp8GroupedGemm<cute::Shape<cute::_64, cute::_128, cute::_128>,
                                   cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpongFP8Blockwise,
                                   cutlass::epilogue::PtrArrayTmaWarpSpecializedPingpong>::Gemm;
size_t fp8_pingpong_workspace_bytes(int groups) {
  return workspace_bytes<Fp8Pingpong, true>(groups);
}
void fp8_pingpong_run(const GroupedGemmArgs& args, cudaStream_t stream) {
  run<Fp8Pingpong, true, 1>(args, stream);
}
}  // namespace grouped_detail

}  // namespace orchid::kernels
