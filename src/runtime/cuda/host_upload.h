// Host -> device copies of checkpoint tensors through two pinned staging buffers: the copy of one chunk
// overlaps the page-cache read (mmap) of the next. Reports progress on stderr for large uploads.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace orchid::runtime::cuda {

class HostUploader {
 public:
  HostUploader(size_t total_bytes, cudaStream_t stream, size_t chunk_bytes = 64ull << 20);
  ~HostUploader();
  HostUploader(const HostUploader&) = delete;
  HostUploader& operator=(const HostUploader&) = delete;

  // Copies `bytes` from host memory (e.g. an mmap'd tensor) to `dst`. Returns when the source may be reused.
  void upload(void* dst, const void* src, size_t bytes);
  void finish();  // waits for the last copies, ends the progress line

 private:
  cudaStream_t stream_;
  size_t chunk_;
  uint8_t* pinned_[2] = {nullptr, nullptr};
  cudaEvent_t done_[2] = {nullptr, nullptr};
  int next_ = 0;
  size_t total_, sent_ = 0;
  int last_percent_ = -1;
  double start_s_ = 0;
};

}  // namespace orchid::runtime::cuda
