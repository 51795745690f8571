// BF16 grouped GEMM (CUTLASS Hopper ptr-array, TMA + warp-specialized cooperative WGMMA, fp32 accumulate).
// Serves the `--weights bf16` expert path and MXFP4 prefill when the BF16 dequantized workspace is chosen.
//
// Napkin math (gpt-oss-20b, 8192-token prefill, E=32, ~1024 rows per expert):
//   gate_up 2 * 32768 * 5760 * 2880 = 1.09 TFLOP -> 1.46 ms at the measured 742 TFLOP/s BF16 ceiling;
//   down 0.54 TFLOP -> 0.73 ms. About 1.8x the FP8 path: BF16 experts are the reference-precision option.
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/group_array_problem_shape.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "kernels/gemm/grouped_gemm_cutlass.cuh"

namespace orchid::kernels {
namespace {

using namespace cute;

using ElementAB = cutlass::bfloat16_t;
using ElementD = cutlass::bfloat16_t;
using LayoutA = cutlass::layout::RowMajor;     // [M, K]
using LayoutB = cutlass::layout::ColumnMajor;  // W [N, K] row-major
using LayoutD = cutlass::layout::RowMajor;     // [M, N]
constexpr int kAlign = 8;                      // 16 bytes

using TileShape = Shape<_128, _128, _64>;
using ClusterShape = Shape<_1, _1, _1>;

using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
    cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, LayoutD*, kAlign, ElementD, LayoutD*,
    kAlign, cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative,
    cutlass::epilogue::fusion::LinearCombination<ElementD, float, void, float>>::CollectiveOp;

using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementAB, LayoutA*, kAlign, ElementAB, LayoutB*,
    kAlign, float, TileShape, ClusterShape,
    cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
        sizeof(typename CollectiveEpilogue::SharedStorage))>,
    cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative>::CollectiveOp;

using GemmKernel =
    cutlass::gemm::kernel::GemmUniversal<cutlass::gemm::GroupProblemShape<Shape<int, int, int>>,
                                         CollectiveMainloop, CollectiveEpilogue>;
using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;

}  // namespace

size_t grouped_gemm_bf16_workspace_bytes(int num_groups) {
  return grouped_detail::workspace_bytes<Gemm, false>(num_groups);
}

void grouped_gemm_bf16(const GroupedGemmArgs& args, cudaStream_t stream) {
  grouped_detail::run<Gemm, false, 2>(args, stream);
}

}  // namespace orchid::kernels
