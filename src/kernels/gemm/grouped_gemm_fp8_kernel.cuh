// The CUTLASS type for the FP8 blockwise-scaled grouped GEMM, parameterized by tile and schedule; each
// configuration is instantiated in its own .cu file (compile time and memory).
//
// A e4m3 [M_g, K] with one fp32 scale per 1x128 (row, k-block); B e4m3 [N, K] with one fp32 scale per
// 128x128 block; both scale tensors K-major, so a group's activation scales start at row offset * (K/128).
// WGMMA accumulates each 128-k block in fp32 and the mainloop promotes it into a second fp32 accumulator
// times sfa*sfb, so FP8 accumulation never spans blocks. The two accumulators are why a consumer warpgroup
// is kept at 64x128 or 128x128 of output (64 or 128 fp32 registers each).
#pragma once

#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/group_array_problem_shape.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"

namespace orchid::kernels::grouped_detail {

template <class TileShape, class KernelSchedule, class EpilogueSchedule>
struct Fp8GroupedGemm {
  using ElementA = cutlass::float_e4m3_t;
  using ElementB = cutlass::float_e4m3_t;
  using ElementD = cutlass::bfloat16_t;
  using LayoutA = cutlass::layout::RowMajor;     // [M, K], K contiguous
  using LayoutB = cutlass::layout::ColumnMajor;  // B as K x N column-major == W [N, K] row-major
  using LayoutD = cutlass::layout::RowMajor;     // [M, N]
  static constexpr int kAlignAB = 16;            // elements: 16 bytes for TMA
  static constexpr int kAlignD = 8;
  using ClusterShape = cute::Shape<cute::_1, cute::_1, cute::_1>;
  using ScaleConfig =
      cutlass::detail::Sm90BlockwiseScaleConfig<1, 128, 128, cute::GMMA::Major::K, cute::GMMA::Major::K>;
  using LayoutSFA = decltype(ScaleConfig::deduce_layoutSFA());
  using LayoutSFB = decltype(ScaleConfig::deduce_layoutSFB());

  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, LayoutD*, kAlignD, ElementD,
      LayoutD*, kAlignD, EpilogueSchedule,
      cutlass::epilogue::fusion::LinearCombination<ElementD, float, void, float>>::CollectiveOp;

  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementA, cute::tuple<LayoutA*, LayoutSFA*>,
      kAlignAB, ElementB, cute::tuple<LayoutB*, LayoutSFB*>, kAlignAB, float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename CollectiveEpilogue::SharedStorage))>,
      KernelSchedule>::CollectiveOp;

  using GemmKernel =
      cutlass::gemm::kernel::GemmUniversal<cutlass::gemm::GroupProblemShape<cute::Shape<int, int, int>>,
                                           CollectiveMainloop, CollectiveEpilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;
};

}  // namespace orchid::kernels::grouped_detail
