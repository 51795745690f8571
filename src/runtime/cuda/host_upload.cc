#include "runtime/cuda/host_upload.h"

#include <unistd.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "kernels/common/cuda_check.h"

namespace orchid::runtime::cuda {

namespace {
double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

HostUploader::HostUploader(size_t total_bytes, cudaStream_t stream, size_t chunk_bytes)
    : stream_(stream), chunk_(chunk_bytes), total_(total_bytes), start_s_(now_s()) {
  for (int i = 0; i < 2; ++i) {
    ORCHID_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&pinned_[i]), chunk_));
    ORCHID_CUDA_CHECK(cudaEventCreateWithFlags(&done_[i], cudaEventDisableTiming));
  }
}

HostUploader::~HostUploader() {
  cudaStreamSynchronize(stream_);
  for (int i = 0; i < 2; ++i) {
    if (pinned_[i]) cudaFreeHost(pinned_[i]);
    if (done_[i]) cudaEventDestroy(done_[i]);
  }
}

void HostUploader::upload(void* dst, const void* src, size_t bytes) {
  const auto* s = static_cast<const uint8_t*>(src);
  auto* d = static_cast<uint8_t*>(dst);
  for (size_t off = 0; off < bytes; off += chunk_) {
    const size_t n = std::min(chunk_, bytes - off);
    const int b = next_;
    next_ ^= 1;
    ORCHID_CUDA_CHECK(cudaEventSynchronize(done_[b]));  // the copy that last used this buffer has finished
    std::memcpy(pinned_[b], s + off, n);
    ORCHID_CUDA_CHECK(cudaMemcpyAsync(d + off, pinned_[b], n, cudaMemcpyHostToDevice, stream_));
    ORCHID_CUDA_CHECK(cudaEventRecord(done_[b], stream_));
    sent_ += n;
  }
  if (total_ >= (1ull << 30) && isatty(2)) {
    const int pct = int(100.0 * double(sent_) / double(total_));
    if (pct != last_percent_) {
      last_percent_ = pct;
      const double s = now_s() - start_s_;
      std::fprintf(stderr, "\rloading weights: %3d%% (%.1f / %.1f GB, %.1f GB/s)", pct, double(sent_) / 1e9,
                   double(total_) / 1e9, double(sent_) / 1e9 / std::max(s, 1e-6));
    }
  }
}

void HostUploader::finish() {
  ORCHID_CUDA_CHECK(cudaStreamSynchronize(stream_));
  if (last_percent_ >= 0) std::fprintf(stderr, "\n");
}

}  // namespace orchid::runtime::cuda
