#include "runtime/warm_up.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "runtime/sequence_runner.h"

namespace orchid::runtime {
namespace {

// Ordinary token ids (the step shapes matter, not the values).
int32_t warm_up_token(size_t i, int32_t vocab) {
  return int32_t((i * 7919 + 13) % size_t(std::min(vocab, 200000)));
}

// One decode step of B one-token sequences at position 0, sequence s on page s of each pool: a graphed
// backend's first step of a batch bucket runs its layers eagerly (timing the GEMMs' choices), captures
// them and replays the graph (CudaRank::forward_graph), which is all the warming a bucket needs.
void decode_step(Backend& backend, int32_t B, const SamplingParams& params) {
  const KvCacheSpec spec = backend.kv_spec();
  StepBatch b;
  b.params.push_back(params);
  for (int32_t s = 0; s < B; ++s) {
    StepSequence q;
    q.seq_id = s;
    q.token_begin = s;
    q.num_tokens = 1;
    q.start_pos = 0;
    q.sample = true;
    q.full_table_begin = q.sliding_table_begin = s;
    q.num_full_pages = q.num_sliding_pages = 1;
    b.full_page_table.push_back(s);
    b.sliding_page_table.push_back(spec.num_sliding_pages > 0 ? s : kNoPage);
    b.tokens.push_back(warm_up_token(size_t(s), backend.model_config().vocab_size));
    b.seqs.push_back(q);
  }
  backend.forward(b);
}

// The prompt lengths warm_up feeds: 128 tokens (fewer if one step or the pools hold fewer), then the
// backend's longer warm-up lengths, each cut to the longest prompt that one step, the pools and max_sequence
// hold. Every prompt leaves room for the three decode steps that follow the short one.
std::vector<int32_t> prompt_lengths(const Backend& backend, int64_t max_sequence) {
  const KvCacheSpec spec = backend.kv_spec();
  int64_t longest = std::min<int64_t>(backend.max_step_tokens(), max_sequence - 4);
  longest = std::min<int64_t>(longest, int64_t(spec.num_full_pages) * spec.page_size - 4);
  if (spec.sliding_window > 0)  // a chunk's sliding pages, one more for a start inside a page
    longest = std::min<int64_t>(longest, int64_t(spec.num_sliding_pages - 1) * spec.page_size);
  const int32_t prompt = int32_t(std::max<int64_t>(1, std::min<int64_t>(128, longest)));
  std::vector<int32_t> lengths = {prompt};
  for (const int32_t n : backend.prefill_warm_up_lengths()) {
    const int32_t m = int32_t(std::min<int64_t>(n, longest));  // the longest that fits stands in for n
    if (m > lengths.back()) lengths.push_back(m);
  }
  return lengths;
}

}  // namespace

int32_t longest_warm_up_prompt(const Backend& backend, int64_t max_sequence) {
  return prompt_lengths(backend, max_sequence).back();
}

double warm_up(Backend& backend, int32_t max_batch, int64_t max_sequence) {
  const auto t0 = std::chrono::steady_clock::now();
  const int32_t vocab = backend.model_config().vocab_size;
  auto prompt_of = [&](int32_t n) {
    std::vector<int32_t> ids(static_cast<size_t>(n));
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = warm_up_token(i, vocab);
    return ids;
  };
  // The longer prompts first (Backend::prefill_warm_up_lengths), then a prompt short enough for any cache.
  const auto lengths = prompt_lengths(backend, max_sequence);
  for (size_t k = 1; k < lengths.size(); ++k) SequenceRunner(backend).feed(prompt_of(lengths[k]), true);
  const std::vector<int32_t> ids = prompt_of(lengths[0]);
  const KvCacheSpec spec = backend.kv_spec();
  for (const float temperature : {0.0f, 1.0f}) {  // arg-max and the GPU sampler: separate graphs
    SamplingParams params;
    params.temperature = temperature;
    params.seed = 1;
    SequenceRunner runner(backend, params);
    StepOutput out = runner.feed(ids, true);
    // Decode steps of one sequence: batch 1's graph, and the host path of steps that follow a prefill.
    for (int step = 0; step < 3 && !out.samples.empty(); ++step)
      out = runner.feed({out.samples[0].token}, true);
    // The larger batches' graphs, as far as the pools give every sequence a page of its own.
    for (const int32_t B : backend.decode_graph_batches())
      if (B > 1 && B <= max_batch && B <= spec.num_full_pages &&
          (spec.num_sliding_pages == 0 || B <= spec.num_sliding_pages))
        decode_step(backend, B, params);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace orchid::runtime
