// Programmatic dependent launch (Hopper): a kernel launched with launch_pdl may be scheduled while the
// previous kernel of the stream is still finishing, so its launch latency and its CTAs' start-up overlap
// that kernel's tail, and it may read what the previous kernel does not write (weights) early.
//
// The contract, for every kernel launched with launch_pdl:
//   - pdl_wait() returns once the previous kernel has completed and its writes are visible: call it before
//     reading or writing anything an earlier kernel of the stream touches, and on every path before the
//     kernel returns (so that "this kernel is complete" keeps implying "every earlier kernel is complete").
//     What a kernel before the previous one wrote may be read before it: the previous kernel triggered only
//     after its own wait, so that one had completed before this kernel started (the down GEMM's experts);
//   - pdl_launch_dependents() lets the next kernel be scheduled before this one's CTAs exit (they count as
//     triggered when they exit). It changes no visibility, but the next kernel's CTAs then sit on the SMs
//     waiting, so it belongs after a kernel's main loop, not at its start: triggered at the start of every
//     kernel, a decode step at batch 1 took 2.92 ms instead of 2.45 (the waiting CTAs of the following
//     kernels crowd out the running one).
// Launched without the attribute (other callers, ORCHID_PDL=0) both are no-ops. A kernel after one launched
// the ordinary way (cuBLASLt, copies) simply starts when that one completes.
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "kernels/common/cuda_check.h"

namespace orchid::kernels {

__device__ __forceinline__ void pdl_launch_dependents() {
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}
__device__ __forceinline__ void pdl_wait() {
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
}

// Whether launch_pdl sets the attribute: on unless the environment says ORCHID_PDL=0 (read once).
bool pdl_enabled();

// launch_pdl_cluster: the same for a kernel of thread-block clusters of `cluster` blocks along x (grid.x a
// multiple of it; cluster 0: no cluster attribute, as launch_pdl).
template <class... Params, class... Args>
void launch_pdl_cluster(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, unsigned cluster,
                        cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[2];
  unsigned n = 0;
  if (cluster > 0) {
    attr[n].id = cudaLaunchAttributeClusterDimension;
    attr[n].val.clusterDim.x = cluster;
    attr[n].val.clusterDim.y = 1;
    attr[n].val.clusterDim.z = 1;
    ++n;
  }
  if (pdl_enabled()) {
    attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n].val.programmaticStreamSerializationAllowed = 1;
    ++n;
  }
  cfg.attrs = attr;
  cfg.numAttrs = n;
  ORCHID_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

template <class... Params, class... Args>
void launch_pdl(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                Args&&... args) {
  launch_pdl_cluster(kernel, grid, block, smem, 0, stream, std::forward<Args>(args)...);
}

}  // namespace orchid::kernels
