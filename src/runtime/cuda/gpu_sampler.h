// The CUDA backend's sampler: turns a step's sampled rows of logits into tokens on the GPU
// (kernels/sampling), with the host sampler's semantics. Owns the per-row parameter and result buffers
// (pinned on the host, fixed on the device) and the history, banned-token and penalty scratch buffers,
// which grow on the rare step that needs more (a long penalized history) and are then kept.
#pragma once

#include <cuda_runtime.h>

#include <vector>

#include "kernels/sampling/sampling.h"
#include "runtime/backend.h"
#include "runtime/cuda/device_memory.h"

namespace orchid::runtime::cuda {

class GpuSampler {
 public:
  GpuSampler(int64_t max_rows, int64_t vocab);
  ~GpuSampler();
  GpuSampler(const GpuSampler&) = delete;
  GpuSampler& operator=(const GpuSampler&) = delete;

  // Enqueues sampling of every sequence of `b` with sample=true; row r of `logits` belongs to the r-th of them.
  // Penalties and banned tokens are applied to `logits` in place.
  void launch(const StepBatch& b, float* logits, cudaStream_t stream);
  // Once the stream has passed the launch: the sampled tokens, in StepBatch::seqs order.
  std::vector<SampledToken> results() const;

 private:
  void ensure(DeviceBuffer& buf, size_t bytes, const char* what);

  int64_t max_rows_, vocab_;
  int64_t rows_ = 0;
  kernels::sampling::RowParams* params_h_ = nullptr;  // pinned
  kernels::sampling::RowResult* results_h_ = nullptr;  // pinned
  DeviceBuffer params_d_, results_d_, history_d_, history_raw_d_, banned_d_, scratch_d_;
};

}  // namespace orchid::runtime::cuda
