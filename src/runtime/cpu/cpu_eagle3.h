// An EAGLE-3 draft head on the CPU backend, in fp32 (model/eagle3.h has the math and the format). Its K/V is
// one more full-attention layer addressed by the target's page tables, so rejected drafts roll back with the
// target's (the next step rewrites those positions); the K/V of a run's later draft steps, which no page
// covers yet, lives in a scratch buffer for that run only.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/eagle3.h"
#include "model/rope.h"
#include "runtime/backend.h"
#include "runtime/cpu/cpu_linear.h"
#include "runtime/sampling_params.h"

namespace orchid::runtime::cpu {

class CpuEagle3Head {
 public:
  // `target_embedding`: the target's, used unless the head has its own; `spec`: the target's KV pages.
  CpuEagle3Head(model::Eagle3Head head, const MatrixRef& target_embedding, const KvCacheSpec& spec);

  const model::Eagle3Config& config() const { return head_.config; }
  // Width of the target states the head reads: 3 x hidden.
  int64_t aux_width() const { return 3 * head_.config.hidden_size; }

  // g = fc(aux) for n rows of aux_width() floats -> n x hidden.
  std::vector<float> combine(const float* aux, int64_t n) const;

  // One sequence's rows at consecutive positions first_pos..first_pos + n - 1: row i pairs g[i] (hidden
  // floats) with the token at position first_pos + i + 1. Writes the head's K/V at those positions into the
  // pages of `table` (logical page p of the sequence = table[p]) and returns each row's `pre` (n x hidden).
  std::vector<float> catch_up(const std::vector<float>& g, std::span<const int32_t> next_tokens,
                              int32_t first_pos, std::span<const int32_t> table);

  // Up to k drafts following a caught-up row: `pre` is that row's output at position `pos`; each draft
  // step feeds the drafted token and its own pre back, one position on (scratch K/V). Draft j is drawn
  // from the head's distribution with the request's parameters and the very Philox draw the target makes
  // at output index sample_index + j (coupled: where the two distributions agree, the target's draw is
  // the draft); greedy requests take the arg-max.
  std::vector<int32_t> draft(std::vector<float> pre, int32_t pos, int32_t k, std::span<const int32_t> table,
                             const SamplingParams& params, int32_t sample_index);

 private:
  // The layer on n rows at positions first_pos.. with K/V written to `table` pages (positions < paged_end)
  // or the scratch buffer (from paged_end on).
  std::vector<float> layer(const std::vector<float>& g, std::span<const int32_t> tokens, int32_t first_pos,
                           std::span<const int32_t> table, int32_t paged_end);
  int32_t draw(const float* pre, const SamplingParams& params, int32_t sample_index) const;
  float* kv_row(bool key, int32_t page, int32_t slot);

  model::Eagle3Head head_;
  MatrixRef embedding_, fc_, q_, k_, v_, o_, gate_, up_, down_, lm_head_;
  std::vector<float> input_norm_fc_, input_layernorm_, hidden_norm_, post_norm_, final_norm_;
  model::ModelConfig attn_;  // the head's attention sizes, for the shared sink_attention block
  model::RopeTables rope_;
  KvCacheSpec spec_;
  std::vector<float> k_pool_, v_pool_;
  std::vector<float> scratch_k_, scratch_v_;  // a draft run's K/V past the paged positions
  int32_t scratch_begin_ = 0;
};

}  // namespace orchid::runtime::cpu
