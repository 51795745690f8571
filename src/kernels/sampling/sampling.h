// Sampling on the GPU: one thread block per logits row applies the request's allowed-token mask, penalties
// and banned tokens,
// then draws greedily or by temperature / top-k / top-p / min-p with the request's seed, and reports
// logprobs. The semantics are the host sampler's (runtime/sampler.h), step for step, so that both backends
// draw the same token from the same logits; kernels/sampling tests compare the two on random rows.
//
// How a row is sampled without sorting it: a token's rank is its 52-bit key (logit as an order-preserving
// integer, then the inverted id, so ties go to the lower id). The top-k boundary and the top-p boundary are
// found by a radix select on that key (8 bits per pass, counting tokens or summing weights per digit), the
// candidates are then "key >= boundary and weight >= min_p", and the draw is an inverse CDF over the
// candidates in ascending id order (a block-wide scan), like the host's.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace orchid::kernels::sampling {

constexpr int kMaxTopLogprobs = 20;

// One sampled row. History and banned ids index the arrays passed to sample_rows.
struct RowParams {
  int32_t logits_row = 0;
  int32_t greedy = 0;  // SamplingParams::is_greedy()
  float temperature = 1.0f;
  int32_t top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  float frequency_penalty = 0.0f;
  float presence_penalty = 0.0f;
  float repetition_penalty = 1.0f;
  int32_t penalties = 0;  // SamplingParams::uses_penalties()
  uint64_t seed = 0;
  int32_t sample_index = 0;
  int32_t num_logprobs = -1;  // -1 none, 0 the sampled token's, N <= kMaxTopLogprobs: plus the N most likely
  int32_t prompt_begin = 0, prompt_len = 0;
  int32_t output_begin = 0, output_len = 0;
  int32_t banned_begin = 0, num_banned = 0;
  int32_t mask_row = -1;  // row of SampleArgs::token_masks (structured outputs); -1: every token allowed
};

struct RowResult {
  int32_t token = -1;  // -1: every token was banned
  float logprob = 0.0f;
  int32_t num_top = 0;
  int32_t top_ids[kMaxTopLogprobs];
  float top_logprobs[kMaxTopLogprobs];
};

// Scratch for penalties: one int32 per (row, vocab id), zero before the first call (cudaMemset) and left zero
// by every call.
size_t penalty_scratch_bytes(int64_t rows, int64_t vocab);

struct SampleArgs {
  float* logits = nullptr;  // [*, vocab] fp32; rows that are sampled get penalties/bans applied in place
  int64_t vocab = 0;
  const RowParams* params = nullptr;  // [rows]
  int64_t rows = 0;
  const int32_t* history = nullptr;  // prompt/output token ids for penalties (ids in [0, vocab))
  float* history_raw = nullptr;      // [len(history)]: scratch, the raw logits of penalized ids
  const int32_t* banned = nullptr;   // ids in [0, vocab)
  int32_t* penalty_scratch =
      nullptr;               // penalty_scratch_bytes(rows, vocab); needed only if a row has penalties
  RowResult* out = nullptr;  // [rows]
  // Allowed-token bitmasks, `mask_words` uint32 a row: token t may be drawn iff bit t % 32 of word t / 32 is
  // set. Tokens a row's mask leaves out are -inf before anything else, so its logprobs are those of the
  // masked distribution (the host sampler's semantics).
  const uint32_t* token_masks = nullptr;
  int32_t mask_words = 0;
};

// vocab must be below 2^20.
void sample_rows(const SampleArgs& a, cudaStream_t stream);

}  // namespace orchid::kernels::sampling
