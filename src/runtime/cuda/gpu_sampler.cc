#include "runtime/cuda/gpu_sampler.h"

#include <spdlog/spdlog.h>

#include <cstddef>

#include "core/error.h"
#include "kernels/common/cuda_check.h"

namespace orchid::runtime::cuda {

namespace ks = kernels::sampling;

GpuSampler::GpuSampler(int64_t max_rows, int64_t vocab)
    : max_rows_(max_rows),
      vocab_(vocab),
      params_d_(size_t(max_rows) * sizeof(ks::RowParams), "sampling parameters"),
      results_d_(size_t(max_rows) * sizeof(ks::RowResult), "sampling results") {
  ORCHID_CUDA_CHECK(
      cudaMallocHost(reinterpret_cast<void**>(&params_h_), size_t(max_rows) * sizeof(ks::RowParams)));
  ORCHID_CUDA_CHECK(
      cudaMallocHost(reinterpret_cast<void**>(&results_h_), 2 * size_t(max_rows) * sizeof(ks::RowResult)));
  static_assert(offsetof(ks::RowResult, token) == 0 && sizeof(ks::RowResult) % sizeof(int32_t) == 0);
}

GpuSampler::~GpuSampler() {
  if (params_h_) cudaFreeHost(params_h_);
  if (results_h_) cudaFreeHost(results_h_);
}

void GpuSampler::ensure(DeviceBuffer& buf, size_t bytes, const char* what) {
  if (buf.size() >= bytes) return;
  const size_t grown = std::max(bytes, buf.size() * 2);
  spdlog::debug("GPU sampler: {} buffer grows to {} bytes", what, grown);
  // Free first; a pipelined step may still be reading the buffer, so wait for the device before.
  ORCHID_CUDA_CHECK(cudaDeviceSynchronize());
  buf = DeviceBuffer();
  buf = DeviceBuffer(grown, what);
}

void GpuSampler::upload(const StepBatch& b, cudaStream_t stream, int64_t pad_to) {
  rows_ = 0;
  mask_words_ = 0;
  masked_ = false;
  bool penalties = false;
  for (const auto& s : b.seqs) {
    if (!s.sample || s.num_tokens == 0) continue;
    // A drafted sequence has a row per sampled position: sample index and output history advance by one.
    for (int32_t offset = 0; offset <= s.num_draft; ++offset) {
      ORCHID_CHECK(rows_ < max_rows_, "more sampled rows than --max-num-seqs (and drafts) planned for");
      const SamplingParams& p = b.params[size_t(s.params_index)];
      ORCHID_CHECK(p.num_logprobs <= ks::kMaxTopLogprobs, "logprobs {} above {}", p.num_logprobs,
                   ks::kMaxTopLogprobs);
      ks::RowParams& r = params_h_[rows_];
      r = {};
      r.logits_row = int32_t(rows_);
      r.greedy = p.is_greedy();
      r.temperature = p.temperature;
      r.top_k = p.top_k;
      r.top_p = p.top_p;
      r.min_p = p.min_p;
      r.frequency_penalty = p.frequency_penalty;
      r.presence_penalty = p.presence_penalty;
      r.repetition_penalty = p.repetition_penalty;
      r.penalties = p.uses_penalties();
      r.seed = p.seed;
      r.sample_index = s.sample_index + offset;
      r.num_logprobs = p.num_logprobs;
      if (r.penalties) {
        penalties = true;
        ORCHID_CHECK(s.prompt_history_begin >= 0 && s.output_history_begin >= 0 &&
                     size_t(s.prompt_history_begin) + size_t(s.prompt_history_len) <=
                         b.history_tokens.size() &&
                     size_t(s.output_history_begin) + size_t(s.output_history_len + offset) <=
                         b.history_tokens.size());
        r.prompt_begin = s.prompt_history_begin;
        r.prompt_len = s.prompt_history_len;
        r.output_begin = s.output_history_begin;
        r.output_len = s.output_history_len + offset;
      }
      ORCHID_CHECK(s.banned_begin >= 0 &&
                   size_t(s.banned_begin) + size_t(s.num_banned) <= b.banned_tokens.size());
      r.banned_begin = s.banned_begin;
      r.num_banned = s.num_banned;
      r.mask_row = s.mask_row;
      masked_ = masked_ || s.mask_row >= 0;
      ++rows_;
    }
  }
  sampled_ = rows_;
  ORCHID_CHECK(pad_to <= max_rows_);
  for (; rows_ < pad_to; ++rows_) {
    params_h_[rows_] = {};
    params_h_[rows_].logits_row = int32_t(rows_);
    params_h_[rows_].greedy = 1;
  }
  if (rows_ == 0) return;
  for (int32_t id : b.banned_tokens) ORCHID_CHECK(id >= 0 && id < vocab_, "banned token {} out of range", id);
  if (penalties) {
    for (int32_t id : b.history_tokens)
      ORCHID_CHECK(id >= 0 && id < vocab_, "history token {} out of range", id);
    const size_t n = std::max<size_t>(b.history_tokens.size(), 1);
    ensure(history_d_, n * 4, "sampling history");
    ensure(history_raw_d_, n * 4, "sampling history logits");
    ORCHID_CUDA_CHECK(cudaMemcpyAsync(history_d_.data(), b.history_tokens.data(), b.history_tokens.size() * 4,
                                      cudaMemcpyHostToDevice, stream));
    if (scratch_d_.size() == 0) {  // first penalized request: one zeroed int per (row, token), kept zero
      scratch_d_ = DeviceBuffer(ks::penalty_scratch_bytes(max_rows_, vocab_), "penalty scratch");
      ORCHID_CUDA_CHECK(cudaMemsetAsync(scratch_d_.data(), 0, scratch_d_.size(), stream));
    }
  }
  if (!b.banned_tokens.empty()) {
    ensure(banned_d_, b.banned_tokens.size() * 4, "banned tokens");
    ORCHID_CUDA_CHECK(cudaMemcpyAsync(banned_d_.data(), b.banned_tokens.data(), b.banned_tokens.size() * 4,
                                      cudaMemcpyHostToDevice, stream));
  }
  ORCHID_CUDA_CHECK(cudaMemcpyAsync(params_d_.data(), params_h_, size_t(rows_) * sizeof(ks::RowParams),
                                    cudaMemcpyHostToDevice, stream));
}

bool GpuSampler::has_masks(const StepBatch& b) {
  for (const auto& s : b.seqs)
    if (s.sample && s.num_tokens > 0 && s.mask_row >= 0) return true;
  return false;
}

void GpuSampler::upload_masks(const StepBatch& b, cudaStream_t stream) {
  mask_words_ = 0;
  if (!has_masks(b)) return;
  b.wait_token_masks();
  const size_t words = size_t(b.mask_words);
  ORCHID_CHECK(words * 32 >= size_t(vocab_) && b.token_masks.size() % words == 0,
               "token masks of {} words a row for a vocabulary of {}", words, vocab_);
  const int64_t mask_rows = int64_t(b.token_masks.size() / words);
  for (const auto& s : b.seqs)
    ORCHID_CHECK(s.mask_row < mask_rows, "mask row {} of {}", s.mask_row, mask_rows);
  ensure(masks_d_, b.token_masks.size() * 4, "token masks");
  ORCHID_CUDA_CHECK(cudaMemcpyAsync(masks_d_.data(), b.token_masks.data(), b.token_masks.size() * 4,
                                    cudaMemcpyHostToDevice, stream));
  mask_words_ = int32_t(words);
}

void GpuSampler::enqueue(float* logits, cudaStream_t stream) {
  ORCHID_CHECK(!masked_ || mask_words_ > 0, "GPU sampler: masked rows need upload_masks() before enqueue()");
  ks::SampleArgs a;
  a.logits = logits;
  a.vocab = vocab_;
  a.params = reinterpret_cast<const ks::RowParams*>(params_d_.data());
  a.rows = rows_;
  a.history = reinterpret_cast<const int32_t*>(history_d_.data());
  a.history_raw = reinterpret_cast<float*>(history_raw_d_.data());
  a.banned = reinterpret_cast<const int32_t*>(banned_d_.data());
  a.penalty_scratch = reinterpret_cast<int32_t*>(scratch_d_.data());
  a.out = reinterpret_cast<ks::RowResult*>(results_d_.data());
  a.token_masks = reinterpret_cast<const uint32_t*>(masks_d_.data());
  a.mask_words = mask_words_;
  ks::sample_rows(a, stream);
}

void GpuSampler::download(cudaStream_t stream, int slot) {
  ORCHID_CHECK(slot == 0 || slot == 1);
  if (sampled_ == 0) return;
  ORCHID_CUDA_CHECK(cudaMemcpyAsync(results_h_ + slot * max_rows_, results_d_.data(),
                                    size_t(sampled_) * sizeof(ks::RowResult), cudaMemcpyDeviceToHost,
                                    stream));
}

const int32_t* GpuSampler::device_tokens() const {
  return reinterpret_cast<const int32_t*>(results_d_.data());
}

std::vector<SampledToken> GpuSampler::results(int slot, int64_t rows) const {
  ORCHID_CHECK(slot == 0 || slot == 1);
  if (rows < 0) rows = sampled_;
  ORCHID_CHECK(rows <= max_rows_);
  std::vector<SampledToken> out(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    const ks::RowResult& g = results_h_[slot * max_rows_ + r];
    ORCHID_CHECK(g.token >= 0 && g.token < vocab_, "every token is banned (GPU sampler row {})", r);
    out[size_t(r)].token = g.token;
    out[size_t(r)].logprob = g.logprob;
    for (int j = 0; j < g.num_top; ++j) out[size_t(r)].top.emplace_back(g.top_ids[j], g.top_logprobs[j]);
  }
  return out;
}

}  // namespace orchid::runtime::cuda
