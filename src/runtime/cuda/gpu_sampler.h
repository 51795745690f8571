// The CUDA backend's sampler: turns a step's sampled rows of logits into tokens on the GPU
// (kernels/sampling), with the host sampler's semantics. Owns the per-row parameter and result buffers
// (pinned on the host, fixed on the device) and the history, banned-token, mask and penalty scratch buffers,
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

  // Uploads the parameters (and the histories and banned ids) of the sequences of `b` with sample=true;
  // row r of the logits belongs to the r-th of them. Padded with inert greedy rows up to `pad_to` rows, so
  // that a decode graph captured for a batch bucket samples every row of it.
  void upload(const StepBatch& b, cudaStream_t stream, int64_t pad_to = 0);
  // Whether a sequence of `b` that is sampled has an allowed-token mask (structured outputs).
  static bool has_masks(const StepBatch& b);
  // Waits for the batch's allowed-token masks (the engine computes them while the model runs) and copies
  // them to the device, after upload() and before enqueue(); does nothing for a batch without masks.
  void upload_masks(const StepBatch& b, cudaStream_t stream);
  // Enqueues the kernel over the uploaded rows; penalties and banned tokens are applied to `logits` in place.
  // Its arguments are fixed buffers, so a CUDA graph may capture it for steps without penalties or banned
  // tokens (whose buffers can grow).
  void enqueue(float* logits, cudaStream_t stream);
  // Enqueues the copy of the results to the host, into one of two result buffers (`slot` 0 or 1: a
  // pipelined step's results are read while the next step's download is enqueued).
  void download(cudaStream_t stream, int slot = 0);
  // Once the stream has passed the download into `slot`: the sampled tokens, in StepBatch::seqs order;
  // `rows`: the download's sampled rows (sampled_rows() when it was enqueued), -1: the last upload's.
  std::vector<SampledToken> results(int slot = 0, int64_t rows = -1) const;
  int64_t sampled_rows() const { return sampled_; }
  // The sampled ids on the device, kTokenStride int32 words apart (row r at device_tokens()[r * stride]).
  const int32_t* device_tokens() const;
  static constexpr int64_t kTokenStride = sizeof(kernels::sampling::RowResult) / sizeof(int32_t);

 private:
  void ensure(DeviceBuffer& buf, size_t bytes, const char* what);

  int64_t max_rows_, vocab_;
  int64_t rows_ = 0;                                   // uploaded rows, padding included
  int64_t sampled_ = 0;                                // rows that belong to sequences
  kernels::sampling::RowParams* params_h_ = nullptr;   // pinned
  kernels::sampling::RowResult* results_h_ = nullptr;  // pinned, two slots of max_rows_
  DeviceBuffer params_d_, results_d_, history_d_, history_raw_d_, banned_d_, scratch_d_, masks_d_;
  int32_t mask_words_ = 0;  // of the masks uploaded for this step; 0: none
  bool masked_ = false;     // a row of this step has a mask
};

}  // namespace orchid::runtime::cuda
