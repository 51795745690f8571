// Micro-benchmark of the GPU sampler (kernels/sampling) on gpt-oss's vocabulary (201,088 logits per row):
// per mode and batch, the median time of a launch and the bandwidth of reading every row once (the least any
// sampler must read) against the measured H200 HBM copy ceiling (4.17 TB/s). The kernel makes several passes
// over each row (stats, selects, scan), so the fraction shows what the passes cost over a single read.
//   sampling_bench [--quick]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/common/cuda_check.h"
#include "kernels/sampling/sampling.h"

namespace orchid::kernels::sampling {
namespace {

constexpr double kPeakTBs = 4.17;
constexpr int64_t kVocab = 201088;

__global__ void fill_logits(float* p, size_t n, uint64_t seed, float scale) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint64_t z = seed + i * 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    const float u1 = (float(z >> 40) + 0.5f) * (1.0f / 16777216.0f);
    const float u2 = float((z >> 16) & 0xffffff) * (1.0f / 16777216.0f);
    p[i] = scale * sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);  // Box-Muller: normal logits
  }
}

struct Mode {
  const char* name;
  RowParams p;
  int history = 0;
};

void run(const Mode& mode, int rows) {
  const size_t n = size_t(rows) * kVocab;
  float *logits = nullptr, *pristine = nullptr, *history_raw = nullptr;
  int32_t *history = nullptr, *scratch = nullptr;
  RowParams* params = nullptr;
  RowResult* out = nullptr;
  ORCHID_CUDA_CHECK(cudaMalloc(&logits, n * 4));
  ORCHID_CUDA_CHECK(cudaMalloc(&pristine, n * 4));
  ORCHID_CUDA_CHECK(cudaMalloc(&params, size_t(rows) * sizeof(RowParams)));
  ORCHID_CUDA_CHECK(cudaMalloc(&out, size_t(rows) * sizeof(RowResult)));
  const int hist_len = std::max(mode.history, 1) * rows;
  ORCHID_CUDA_CHECK(cudaMalloc(&history, size_t(hist_len) * 4));
  ORCHID_CUDA_CHECK(cudaMalloc(&history_raw, size_t(hist_len) * 4));
  ORCHID_CUDA_CHECK(cudaMalloc(&scratch, penalty_scratch_bytes(rows, kVocab)));
  ORCHID_CUDA_CHECK(cudaMemset(scratch, 0, penalty_scratch_bytes(rows, kVocab)));
  fill_logits<<<1024, 256>>>(pristine, n, 42, 3.0f);
  std::vector<int32_t> h_hist(static_cast<size_t>(hist_len));
  for (size_t i = 0; i < h_hist.size(); ++i) h_hist[i] = int32_t((i * 7919) % 50000);
  ORCHID_CUDA_CHECK(cudaMemcpy(history, h_hist.data(), h_hist.size() * 4, cudaMemcpyHostToDevice));
  std::vector<RowParams> hp(size_t(rows), mode.p);
  for (int r = 0; r < rows; ++r) {
    hp[size_t(r)].logits_row = r;
    hp[size_t(r)].seed = uint64_t(r) * 1000003u;
    hp[size_t(r)].prompt_begin = r * mode.history;
    hp[size_t(r)].prompt_len = mode.history / 2;
    hp[size_t(r)].output_begin = r * mode.history + mode.history / 2;
    hp[size_t(r)].output_len = mode.history - mode.history / 2;
  }
  ORCHID_CUDA_CHECK(cudaMemcpy(params, hp.data(), hp.size() * sizeof(RowParams), cudaMemcpyHostToDevice));
  SampleArgs a;
  a.logits = logits;
  a.vocab = kVocab;
  a.params = params;
  a.rows = rows;
  a.history = history;
  a.history_raw = history_raw;
  a.penalty_scratch = scratch;
  a.out = out;
  cudaEvent_t e0, e1;
  ORCHID_CUDA_CHECK(cudaEventCreate(&e0));
  ORCHID_CUDA_CHECK(cudaEventCreate(&e1));
  std::vector<float> ms;
  for (int it = 0; it < 23; ++it) {
    ORCHID_CUDA_CHECK(
        cudaMemcpyAsync(logits, pristine, n * 4, cudaMemcpyDeviceToDevice));  // penalties mutate
    ORCHID_CUDA_CHECK(cudaEventRecord(e0));
    sample_rows(a, nullptr);
    ORCHID_CUDA_CHECK(cudaEventRecord(e1));
    ORCHID_CUDA_CHECK(cudaEventSynchronize(e1));
    float t = 0;
    ORCHID_CUDA_CHECK(cudaEventElapsedTime(&t, e0, e1));
    if (it >= 3) ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  const double us = 1e3 * ms[ms.size() / 2];
  const double gbs = double(n) * 4 / (us * 1e-6) / 1e9;
  std::printf(
      "sampling %-28s rows %4d  %9.1f us  %7.1f us/row  %7.0f GB/s  %5.1f%% of %.2f TB/s (one read)\n",
      mode.name, rows, us, us / rows, gbs, 100 * gbs / (kPeakTBs * 1000), kPeakTBs);
  std::fflush(stdout);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaFree(logits);
  cudaFree(pristine);
  cudaFree(params);
  cudaFree(out);
  cudaFree(history);
  cudaFree(history_raw);
  cudaFree(scratch);
}

}  // namespace
}  // namespace orchid::kernels::sampling

int main(int argc, char** argv) {
  using namespace orchid::kernels::sampling;
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  std::vector<Mode> modes;
  RowParams p;
  p.greedy = 1;
  modes.push_back({"greedy + 5 logprobs", p});
  modes.back().p.num_logprobs = 5;
  p = RowParams{};
  modes.push_back({"temperature 1", p});
  p.top_p = 0.9f;
  modes.push_back({"top-p 0.9", p});
  p.top_k = 50;
  modes.push_back({"top-k 50 + top-p 0.9", p});
  p = RowParams{};
  p.min_p = 0.05f;
  modes.push_back({"min-p 0.05", p});
  p = RowParams{};
  p.penalties = 1;
  p.repetition_penalty = 1.1f;
  p.frequency_penalty = 0.5f;
  modes.push_back({"penalties (4096 history)", p, 4096});
  const std::vector<int> batches = quick ? std::vector<int>{1, 64} : std::vector<int>{1, 8, 64, 256};
  for (const auto& m : modes)
    for (int rows : batches) run(m, rows);
  return 0;
}
