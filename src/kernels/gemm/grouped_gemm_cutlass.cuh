// Shared driver for the CUTLASS ptr-array grouped GEMMs (grouped_gemm_*.cu): a set-up kernel turns the
// device-side expert offsets into CUTLASS's per-group arrays (problem shapes, pointers, strides, scale
// layouts), then the persistent kernel runs with a grid of one CTA per SM. The host never reads the offsets.
//
// Workspace: [per-group arrays | CUTLASS's own workspace (TMA descriptors per SM)], each part 256-aligned.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <utility>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/util/packed_stride.hpp"
#include "kernels/common/cuda_check.h"
#include "kernels/common/device_info.h"
#include "kernels/gemm/grouped_gemm.h"

namespace orchid::kernels::grouped_detail {

inline size_t align256(size_t x) {
  return (x + 255) & ~size_t(255);
}

// Byte offsets of the per-group arrays inside the workspace.
template <class Gemm, bool kBlockScaled>
struct Layout {
  using Kernel = typename Gemm::GemmKernel;
  using ProblemShape = typename Kernel::ProblemShape::UnderlyingProblemShape;
  using StrideA = typename Kernel::InternalStrideA;
  using StrideB = typename Kernel::InternalStrideB;
  using StrideD = typename Kernel::InternalStrideD;

  size_t shapes, ptr_a, ptr_b, ptr_d, stride_a, stride_b, stride_d, ptr_sfa, ptr_sfb, layout_sfa, layout_sfb;
  size_t arrays_end;

  explicit Layout(int groups) {
    size_t g = size_t(groups), off = 0;
    auto take = [&](size_t bytes) {
      size_t at = off;
      off = align256(off + bytes);
      return at;
    };
    shapes = take(g * sizeof(ProblemShape));
    ptr_a = take(g * sizeof(void*));
    ptr_b = take(g * sizeof(void*));
    ptr_d = take(g * sizeof(void*));
    stride_a = take(g * sizeof(StrideA));
    stride_b = take(g * sizeof(StrideB));
    stride_d = take(g * sizeof(StrideD));
    if constexpr (kBlockScaled) {
      using Mainloop = typename Kernel::CollectiveMainloop;
      ptr_sfa = take(g * sizeof(void*));
      ptr_sfb = take(g * sizeof(void*));
      layout_sfa = take(g * sizeof(typename Mainloop::InternalLayoutSFA));
      layout_sfb = take(g * sizeof(typename Mainloop::InternalLayoutSFB));
    } else {
      ptr_sfa = ptr_sfb = layout_sfa = layout_sfb = 0;
    }
    arrays_end = off;
  }
};

template <class Gemm, bool kBlockScaled>
struct SetupParams {
  int groups, n, k;
  const int* offsets;
  const uint8_t* a;  // byte pointers: the element size is applied with kElemBytes
  const uint8_t* b;
  uint8_t* d;
  const float* sfa;
  const float* sfb;
  uint8_t* ws;
  Layout<Gemm, kBlockScaled> lay;
};

// One thread per group. Empty groups keep valid (unused) pointers: CUTLASS gives them no tiles.
template <class Gemm, bool kBlockScaled, int kElemBytesAB>
__global__ void grouped_setup_kernel(SetupParams<Gemm, kBlockScaled> p) {
  using L = Layout<Gemm, kBlockScaled>;
  using ElementD = typename Gemm::GemmKernel::ElementD;
  const int g = blockIdx.x * blockDim.x + threadIdx.x;
  if (g >= p.groups) return;
  const int row0 = p.offsets[g];
  const int m = p.offsets[g + 1] - row0;
  const int64_t n = p.n, k = p.k;

  auto* shapes = reinterpret_cast<typename L::ProblemShape*>(p.ws + p.lay.shapes);
  shapes[g] = typename L::ProblemShape{m, p.n, p.k};
  reinterpret_cast<const void**>(p.ws + p.lay.ptr_a)[g] = p.a + int64_t(row0) * k * kElemBytesAB;
  reinterpret_cast<const void**>(p.ws + p.lay.ptr_b)[g] = p.b + int64_t(g) * n * k * kElemBytesAB;
  reinterpret_cast<void**>(p.ws + p.lay.ptr_d)[g] = p.d + int64_t(row0) * n * int64_t(sizeof(ElementD));
  reinterpret_cast<typename L::StrideA*>(p.ws + p.lay.stride_a)[g] =
      cutlass::make_cute_packed_stride(typename L::StrideA{}, {m, p.k, 1});
  reinterpret_cast<typename L::StrideB*>(p.ws + p.lay.stride_b)[g] =
      cutlass::make_cute_packed_stride(typename L::StrideB{}, {p.n, p.k, 1});
  reinterpret_cast<typename L::StrideD*>(p.ws + p.lay.stride_d)[g] =
      cutlass::make_cute_packed_stride(typename L::StrideD{}, {m, p.n, 1});
  if constexpr (kBlockScaled) {
    using Mainloop = typename Gemm::GemmKernel::CollectiveMainloop;
    using ScaleConfig = typename Mainloop::ScaleConfig;
    const int64_t kb = k / 128, nb = (n + 127) / 128;
    reinterpret_cast<const float**>(p.ws + p.lay.ptr_sfa)[g] = p.sfa + int64_t(row0) * kb;
    reinterpret_cast<const float**>(p.ws + p.lay.ptr_sfb)[g] = p.sfb + int64_t(g) * nb * kb;
    reinterpret_cast<typename Mainloop::InternalLayoutSFA*>(p.ws + p.lay.layout_sfa)[g] =
        ScaleConfig::tile_atom_to_shape_SFA(cute::make_shape(m, p.n, p.k, 1));
    reinterpret_cast<typename Mainloop::InternalLayoutSFB*>(p.ws + p.lay.layout_sfb)[g] =
        ScaleConfig::tile_atom_to_shape_SFB(cute::make_shape(m, p.n, p.k, 1));
  }
}

template <class Gemm, bool kBlockScaled>
typename Gemm::Arguments make_arguments(int groups, uint8_t* ws, int max_sms = 0) {
  using L = Layout<Gemm, kBlockScaled>;
  using Kernel = typename Gemm::GemmKernel;
  using ElementA = typename Kernel::ElementA;
  using ElementB = typename Kernel::ElementB;
  using ElementD = typename Kernel::ElementD;
  L lay(groups);
  cutlass::KernelHardwareInfo hw;
  hw.device_id = device_info().device;
  hw.sm_count = max_sms > 0 ? std::min(max_sms, device_info().sm_count) : device_info().sm_count;

  typename Gemm::Arguments args;
  args.mode = cutlass::gemm::GemmUniversalMode::kGrouped;
  // No host problem shapes: the scheduler launches one CTA per SM and reads the shapes on the device.
  args.problem_shape = {groups, reinterpret_cast<typename L::ProblemShape*>(ws + lay.shapes), nullptr};
  auto ptr_a = reinterpret_cast<const ElementA**>(ws + lay.ptr_a);
  auto ptr_b = reinterpret_cast<const ElementB**>(ws + lay.ptr_b);
  auto str_a = reinterpret_cast<typename L::StrideA*>(ws + lay.stride_a);
  auto str_b = reinterpret_cast<typename L::StrideB*>(ws + lay.stride_b);
  if constexpr (kBlockScaled) {
    using Mainloop = typename Kernel::CollectiveMainloop;
    args.mainloop = {ptr_a,
                     str_a,
                     ptr_b,
                     str_b,
                     reinterpret_cast<const float**>(ws + lay.ptr_sfa),
                     reinterpret_cast<typename Mainloop::InternalLayoutSFA*>(ws + lay.layout_sfa),
                     reinterpret_cast<const float**>(ws + lay.ptr_sfb),
                     reinterpret_cast<typename Mainloop::InternalLayoutSFB*>(ws + lay.layout_sfb)};
  } else {
    args.mainloop = {ptr_a, str_a, ptr_b, str_b};
  }
  args.epilogue.ptr_C = nullptr;
  args.epilogue.dC = nullptr;
  args.epilogue.ptr_D = reinterpret_cast<ElementD**>(ws + lay.ptr_d);
  args.epilogue.dD = reinterpret_cast<typename L::StrideD*>(ws + lay.stride_d);
  args.epilogue.thread.alpha = 1.0f;
  args.epilogue.thread.beta = 0.0f;
  args.hw_info = hw;
  return args;
}

template <class Gemm, bool kBlockScaled>
size_t workspace_bytes(int groups) {
  Layout<Gemm, kBlockScaled> lay(groups);
  auto args = make_arguments<Gemm, kBlockScaled>(groups, nullptr);
  return lay.arrays_end + align256(Gemm::get_workspace_size(args));
}

template <class Gemm, bool kBlockScaled, int kElemBytesAB>
void run(const GroupedGemmArgs& a, cudaStream_t stream) {
  ORCHID_KERNEL_REQUIRE(a.num_groups > 0 && a.n > 0 && a.k > 0, "grouped GEMM: empty shape");
  ORCHID_KERNEL_REQUIRE(a.offsets && a.a && a.b && a.d && a.workspace, "grouped GEMM: null pointer");
  ORCHID_KERNEL_REQUIRE((reinterpret_cast<uintptr_t>(a.a) | reinterpret_cast<uintptr_t>(a.b) |
                         reinterpret_cast<uintptr_t>(a.d)) %
                                16 ==
                            0,
                        "grouped GEMM: a, b, d must be 16-byte aligned");
  ORCHID_KERNEL_REQUIRE(reinterpret_cast<uintptr_t>(a.workspace) % 256 == 0,
                        "grouped GEMM: workspace must be 256-byte aligned");
  ORCHID_KERNEL_REQUIRE((a.workspace_bytes >= workspace_bytes<Gemm, kBlockScaled>(a.num_groups)),
                        "grouped GEMM: workspace too small");
  if constexpr (kBlockScaled) {
    ORCHID_KERNEL_REQUIRE(a.k % 128 == 0 && a.n % 16 == 0,
                          "FP8 grouped GEMM: needs k % 128 == 0, n % 16 == 0");
    ORCHID_KERNEL_REQUIRE(a.a_scale && a.b_scale, "FP8 grouped GEMM: null scale pointer");
  } else {
    ORCHID_KERNEL_REQUIRE(a.k % 8 == 0 && a.n % 8 == 0, "BF16 grouped GEMM: needs k % 8 == 0, n % 8 == 0");
  }
  auto* ws = static_cast<uint8_t*>(a.workspace);
  Layout<Gemm, kBlockScaled> lay(a.num_groups);
  SetupParams<Gemm, kBlockScaled> sp{a.num_groups,
                                     a.n,
                                     a.k,
                                     a.offsets,
                                     static_cast<const uint8_t*>(a.a),
                                     static_cast<const uint8_t*>(a.b),
                                     static_cast<uint8_t*>(a.d),
                                     a.a_scale,
                                     a.b_scale,
                                     ws,
                                     lay};
  grouped_setup_kernel<Gemm, kBlockScaled, kElemBytesAB><<<(a.num_groups + 127) / 128, 128, 0, stream>>>(sp);
  ORCHID_CUDA_CHECK_LAUNCH();

  // The CUTLASS arguments depend only on (workspace, group count, SM limit): shapes and pointers are read
  // on the device. So the kernel parameters are built once per workspace and reused: no host work per call
  // beyond the launch, and nothing but kernel launches while a CUDA graph is being captured.
  static std::mutex mu;
  static std::map<std::tuple<void*, int, int>, std::unique_ptr<Gemm>> initialized;
  std::lock_guard<std::mutex> lock(mu);
  std::unique_ptr<Gemm>& gemm = initialized[{a.workspace, a.num_groups, a.max_sms}];
  if (!gemm) {
    auto args = make_arguments<Gemm, kBlockScaled>(a.num_groups, ws, a.max_sms);
    auto g = std::make_unique<Gemm>();
    cutlass::Status st = g->can_implement(args);
    ORCHID_KERNEL_REQUIRE(st == cutlass::Status::kSuccess, cutlassGetStatusString(st));
    st = g->initialize(args, ws + lay.arrays_end, stream);
    ORCHID_KERNEL_REQUIRE(st == cutlass::Status::kSuccess, cutlassGetStatusString(st));
    gemm = std::move(g);
  }
  cutlass::Status st = gemm->run(stream);
  ORCHID_KERNEL_REQUIRE(st == cutlass::Status::kSuccess, cutlassGetStatusString(st));
  ORCHID_CUDA_CHECK_LAUNCH();
}

}  // namespace orchid::kernels::grouped_detail
