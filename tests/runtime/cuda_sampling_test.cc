// The CUDA backend's sampling path end to end on synthetic:tiny (graph replay on the trained tiny model): a
// prefill step of three sequences with temperature/top-p/top-k, penalties, banned tokens and logprobs, whose
// raw logits come back (kSampled) and are sampled again by the host sampler; the backend's tokens, logprobs
// and top-N must be the host's. And sampled decode steps replayed from a CUDA graph draw what the same steps
// draw eagerly. Allowed-token masks (structured outputs), filled only when the backend asks for them, limit
// every draw in both. Drafted steps (speculative decoding) draw at every verified position what the host
// draws from the same logits, and keep the run up to the first differing draw.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../kernels/gpu_test_util.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/sampler.h"

namespace orchid::runtime::cuda {
namespace {

CudaBackendOptions small_options(bool graphs) {
  CudaBackendOptions o;
  o.weights = "bf16";
  o.max_step_tokens = 256;
  o.max_step_seqs = 8;
  o.max_model_len = 1024;
  o.kv_pages = 64;
  o.gpu_memory_utilization = 0.3;
  o.cuda_graphs = graphs;
  return o;
}

TEST(CudaSampling, BackendDrawsWhatTheHostSamplerDrawsFromItsLogits) {
  ORCHID_REQUIRE_GPU_OR_SKIP();
  CudaBackend be("synthetic:tiny", small_options(true));
  const int32_t V = int32_t(be.model_config().vocab_size);
  const KvCacheSpec spec = be.kv_spec();
  int draws = 0;
  for (int round = 0; round < 20; ++round) {
    StepBatch b;
    b.logits = LogitsMode::kSampled;
    const int32_t lens[3] = {5, 9, 3};
    int32_t page = 0;
    for (int i = 0; i < 3; ++i) {
      StepSequence s;
      s.seq_id = i;
      s.token_begin = int32_t(b.tokens.size());
      s.num_tokens = lens[i];
      for (int t = 0; t < lens[i]; ++t) b.tokens.push_back((round * 131 + i * 977 + t * 31) % V);
      const int32_t pages = (lens[i] + spec.page_size - 1) / spec.page_size;
      s.full_table_begin = s.sliding_table_begin = int32_t(b.full_page_table.size());
      for (int32_t p = 0; p < pages; ++p) {
        b.full_page_table.push_back(page);
        b.sliding_page_table.push_back(spec.sliding_window > 0 ? page : kNoPage);
        ++page;
      }
      s.num_full_pages = s.num_sliding_pages = pages;
      s.sample = true;
      s.sample_index = round * 3 + i;
      s.params_index = i;
      SamplingParams p;
      p.seed = 1000 + uint64_t(round);
      if (i == 0) {
        p.temperature = 0.8f;
        p.top_p = 0.9f;
        p.num_logprobs = 5;
        p.repetition_penalty = 1.3f;
        p.frequency_penalty = 0.4f;
        s.prompt_history_begin = int32_t(b.history_tokens.size());
        s.prompt_history_len = lens[i];
        b.history_tokens.insert(b.history_tokens.end(), b.tokens.begin() + s.token_begin, b.tokens.end());
        s.output_history_begin = int32_t(b.history_tokens.size());
        s.output_history_len = 4;
        for (int t = 0; t < 4; ++t) b.history_tokens.push_back((round * 7 + t * 3) % V);
      } else if (i == 1) {
        p.top_k = 20;
        p.temperature = 1.5f;
        p.min_p = 0.01f;
        s.banned_begin = int32_t(b.banned_tokens.size());
        s.num_banned = 2;
        b.banned_tokens.push_back(round % V);
        b.banned_tokens.push_back((round * 13 + 1) % V);
      } else {
        p.temperature = 0.0f;
        p.num_logprobs = 3;
      }
      b.params.push_back(p);
      b.seqs.push_back(s);
    }
    const StepOutput out = be.forward(b);
    ASSERT_EQ(out.samples.size(), 3u);
    ASSERT_EQ(out.logits_rows, 3);
    for (size_t k = 0; k < 3; ++k) {
      const std::span<const float> row(out.logits.data() + k * size_t(V), size_t(V));
      const SampledToken want = sample_token(step_sample_input(b, b.seqs[k], row));
      const SampledToken& got = out.samples[k];
      SCOPED_TRACE(::testing::Message() << "round " << round << " sequence " << k);
      EXPECT_EQ(got.token, want.token);
      EXPECT_NEAR(got.logprob, want.logprob, 1e-5 * std::max(1.0f, std::fabs(want.logprob)));
      ASSERT_EQ(got.top.size(), want.top.size());
      for (size_t j = 0; j < want.top.size(); ++j) {
        EXPECT_EQ(got.top[j].first, want.top[j].first);
        EXPECT_NEAR(got.top[j].second, want.top[j].second,
                    1e-5 * std::max(1.0f, std::fabs(want.top[j].second)));
      }
      ++draws;
    }
  }
  std::printf("CUDA backend: %d sampled tokens equal to the host sampler's on the same logits\n", draws);
}

// Appends sequence i's prompt (token t = token(i, t)) with `pages` pages of its own to `b`; the caller adds
// its sampling parameters.
template <typename TokenOf>
StepSequence add_prompt(StepBatch& b, const KvCacheSpec& spec, int i, int prompt_len, int32_t pages,
                        TokenOf token) {
  StepSequence s;
  s.seq_id = i;
  s.token_begin = int32_t(b.tokens.size());
  s.num_tokens = prompt_len;
  for (int t = 0; t < prompt_len; ++t) b.tokens.push_back(token(i, t));
  s.full_table_begin = s.sliding_table_begin = int32_t(b.full_page_table.size());
  for (int32_t p = 0; p < pages; ++p) {
    b.full_page_table.push_back(i * pages + p);
    b.sliding_page_table.push_back(spec.sliding_window > 0 ? i * pages + p : kNoPage);
  }
  s.num_full_pages = s.num_sliding_pages = pages;
  s.sample = true;
  s.params_index = i;
  return s;
}

// The next decode step of every sequence of `b`: one token each, the one just sampled.
void advance_one_token(StepBatch& b, const std::vector<SampledToken>& sampled, int next_sample_index) {
  b.tokens.clear();
  for (size_t i = 0; i < b.seqs.size(); ++i) {
    b.tokens.push_back(sampled[i].token);
    StepSequence& s = b.seqs[i];
    s.start_pos += s.num_tokens;
    s.token_begin = int32_t(i);
    s.num_tokens = 1;
    s.sample_index = next_sample_index;
  }
}

// The first n held-out prompts of the trained tiny model (its reference, made by transformers' side of
// tools/train/make_reference.py).
std::vector<std::vector<int32_t>> trained_prompts(size_t n) {
  std::ifstream f(std::string(ORCHID_SOURCE_DIR) + "/tests/golden/orchid_tiny/reference.json");
  const nlohmann::json j = nlohmann::json::parse(f);
  std::vector<std::vector<int32_t>> out;
  for (const auto& g : j.at("greedy")) {
    if (out.size() == n) break;
    out.push_back(g.at("prompt").get<std::vector<int32_t>>());
  }
  return out;
}

// On the trained tiny model, whose next-token distributions are peaked: a random-weight model's are nearly
// uniform over 201k tokens, where the last-bit differences between two valid kernel schedules (a graph's
// fixed KV split count, an eager step's own) move an inverse-CDF draw by a few token ids, so equality of
// draws there says nothing about the graph. Here a draw moves only if its uniform lands within about the
// logits' error of a CDF step; logprobs are compared at bf16 accuracy.
TEST(CudaSampling, GraphReplayDrawsWhatEagerDraws) {
  ORCHID_REQUIRE_GPU_OR_SKIP();
  const std::string model = std::string(ORCHID_SOURCE_DIR) + "/models/orchid-tiny";
  CudaBackendOptions graphed_options = small_options(true), eager_options = small_options(false);
  graphed_options.max_step_tokens = eager_options.max_step_tokens =
      512;  // three held-out prompts in one step
  CudaBackend graphed(model, graphed_options);
  CudaBackend eager(model, eager_options);
  const KvCacheSpec spec = graphed.kv_spec();
  constexpr int kSeqs = 3, kSteps = 10;
  const std::vector<std::vector<int32_t>> prompts = trained_prompts(kSeqs);
  ASSERT_EQ(prompts.size(), size_t(kSeqs));
  size_t longest = 0;
  for (const auto& p : prompts) longest = std::max(longest, p.size());
  const int32_t pages = int32_t((longest + kSteps + size_t(spec.page_size) - 1) / size_t(spec.page_size));
  StepBatch b;
  for (int i = 0; i < kSeqs; ++i) {
    const auto& prompt = prompts[size_t(i)];
    const StepSequence s = add_prompt(b, spec, i, int(prompt.size()), pages,
                                      [&prompt](int, int t) { return prompt[size_t(t)]; });
    SamplingParams p;
    p.seed = 77 + uint64_t(i);
    if (i == 0) {
      p.temperature = 0.8f;
      p.top_p = 0.9f;
      p.num_logprobs = 3;
    } else if (i == 1) {
      p.top_k = 20;
    } else {
      p.temperature = 0.0f;
      p.num_logprobs = 2;
    }
    b.params.push_back(p);
    b.seqs.push_back(s);
  }
  int compared = 0;
  for (int step = 0; step <= kSteps; ++step) {
    const StepOutput g = graphed.forward(b);
    const StepOutput e = eager.forward(b);
    ASSERT_EQ(g.samples.size(), size_t(kSeqs));
    ASSERT_EQ(e.samples.size(), size_t(kSeqs));
    for (int i = 0; i < kSeqs; ++i) {
      SCOPED_TRACE(::testing::Message() << "step " << step << " sequence " << i);
      const SampledToken &gs = g.samples[size_t(i)], &es = e.samples[size_t(i)];
      EXPECT_EQ(gs.token, es.token);
      EXPECT_NEAR(gs.logprob, es.logprob, 1e-2 * std::max(1.0f, std::fabs(es.logprob)));
      ASSERT_EQ(gs.top.size(), es.top.size());
      for (size_t j = 0; j < gs.top.size(); ++j)
        EXPECT_NEAR(gs.top[j].second, es.top[j].second, 1e-2 * std::max(1.0f, std::fabs(es.top[j].second)));
      ++compared;
    }
    if (::testing::Test::HasFailure()) return;
    advance_one_token(b, g.samples, step + 1);  // the next step decodes the sampled tokens
  }
  std::printf("CUDA graphs: %d sampled decode tokens of the trained tiny model equal to eager execution\n",
              compared);
}

// A few allowed tokens per sequence, different every step; bit t of word t / 32.
void allow_few(StepBatch& b, int step, int32_t V) {
  b.mask_words = (V + 31) / 32;
  b.token_masks.assign(b.seqs.size() * size_t(b.mask_words), 0u);
  for (size_t i = 0; i < b.seqs.size(); ++i)
    for (int j = 0; j < 3; ++j) {
      const int32_t t = int32_t((step * 7919 + int(i) * 104729 + j * 15485863) % V);
      b.token_masks[i * size_t(b.mask_words) + size_t(t / 32)] |= 1u << (t % 32);
    }
}

bool allowed(const StepBatch& b, size_t row, int32_t t) {
  return (b.token_masks[row * size_t(b.mask_words) + size_t(t / 32)] >> (t % 32)) & 1u;
}

TEST(CudaSampling, MasksLimitEveryDrawInGraphsAndEagerSteps) {
  ORCHID_REQUIRE_GPU_OR_SKIP();
  CudaBackend graphed("synthetic:tiny", small_options(true));
  CudaBackend eager("synthetic:tiny", small_options(false));
  ASSERT_TRUE(graphed.applies_token_masks());
  const int32_t V = int32_t(graphed.model_config().vocab_size);
  const KvCacheSpec spec = graphed.kv_spec();
  constexpr int kSeqs = 4, kPrompt = 5, kSteps = 8;
  const int32_t pages = (kPrompt + kSteps + spec.page_size - 1) / spec.page_size;
  StepBatch b;
  for (int i = 0; i < kSeqs; ++i) {
    StepSequence s =
        add_prompt(b, spec, i, kPrompt, pages, [V](int i, int t) { return (i * 211 + t * 13 + 3) % V; });
    s.mask_row = i == 3 ? -1 : i;  // the last sequence is free
    SamplingParams p;
    p.seed = 5 + uint64_t(i);
    if (i == 0) p.temperature = 0.0f;  // greedy within the mask
    if (i == 1) p.num_logprobs = 4;    // top-N lists only allowed tokens
    if (i == 2) p.top_p = 0.5f;
    b.params.push_back(p);
    b.seqs.push_back(s);
  }
  int waits = 0, checked = 0;
  for (int step = 0; step <= kSteps; ++step) {
    // The masks are written only when the backend waits for them, as the engine's worker does.
    b.token_masks.clear();
    b.token_masks_ready = [&b, &waits, step, V] {
      ++waits;
      allow_few(b, step, V);
    };
    b.logits = step == 0 ? LogitsMode::kSampled : LogitsMode::kNone;  // step 0: raw logits for the host
    const StepOutput e = eager.forward(b);
    b.token_masks.clear();
    const StepOutput g = graphed.forward(b);
    ASSERT_EQ(g.samples.size(), size_t(kSeqs));
    ASSERT_EQ(e.samples.size(), size_t(kSeqs));
    for (int i = 0; i < kSeqs; ++i) {
      SCOPED_TRACE(::testing::Message() << "step " << step << " sequence " << i);
      const SampledToken& got = g.samples[size_t(i)];
      EXPECT_EQ(got.token, e.samples[size_t(i)].token);
      EXPECT_NEAR(got.logprob, e.samples[size_t(i)].logprob, 1e-3);
      if (i < 3) {
        EXPECT_TRUE(allowed(b, size_t(i), got.token)) << "token " << got.token;
        for (const auto& [id, lp] : got.top) EXPECT_TRUE(allowed(b, size_t(i), id)) << "top id " << id;
        ++checked;
      }
      if (step == 0) {  // the host sampler with the same mask on the backend's raw logits
        const std::span<const float> row(e.logits.data() + size_t(i) * size_t(V), size_t(V));
        const SampledToken want = sample_token(step_sample_input(b, b.seqs[size_t(i)], row));
        EXPECT_EQ(e.samples[size_t(i)].token, want.token);
        EXPECT_NEAR(e.samples[size_t(i)].logprob, want.logprob,
                    1e-5 * std::max(1.0f, std::fabs(want.logprob)));
        ASSERT_EQ(e.samples[size_t(i)].top.size(), want.top.size());
      }
    }
    if (::testing::Test::HasFailure()) return;
    advance_one_token(b, g.samples, step + 1);
  }
  EXPECT_EQ(waits, 2 * (kSteps + 1));
  std::printf("CUDA masks: %d constrained draws within their masks, graphs equal to eager\n", checked);
}

TEST(CudaSampling, DraftedStepsDrawWhatTheHostDrawsAndKeepTheAcceptedRun) {
  ORCHID_REQUIRE_GPU_OR_SKIP();
  CudaBackendOptions o = small_options(true);
  o.max_draft_tokens = 3;
  CudaBackend be("synthetic:tiny", o);
  ASSERT_EQ(be.max_draft_tokens(), 3);
  const int32_t V = int32_t(be.model_config().vocab_size);
  const KvCacheSpec spec = be.kv_spec();
  auto token = [V](int i, int t) { return (i * 977 + t * 31 + 5) % V; };
  // Prompts: greedy, sampled, penalized.
  StepBatch prefill;
  for (int i = 0; i < 3; ++i) {
    prefill.seqs.push_back(add_prompt(prefill, spec, i, 6 + i, 4, token));
    SamplingParams p;
    p.seed = 40 + uint64_t(i);
    if (i == 0) p.temperature = 0;
    if (i == 1) p.temperature = 0.9f, p.top_k = 50;
    if (i == 2) p.temperature = 0.7f, p.repetition_penalty = 1.2f, p.num_logprobs = 2;
    prefill.params.push_back(p);
  }
  const StepOutput first = be.forward(prefill);
  ASSERT_EQ(first.samples.size(), 3u);
  int accepted_total = 0;
  std::vector<int32_t> drawn_first(3, 0);  // the draw after the pending token, round 0
  for (int round = 0; round < 2; ++round) {
    // The pending token and three drafts; in round 1 the first draft is what round 0 drew there.
    StepBatch b = prefill;
    b.logits = LogitsMode::kSampled;
    b.tokens.clear();
    b.history_tokens.clear();
    for (size_t i = 0; i < 3; ++i) {
      StepSequence& s = b.seqs[i];
      s.start_pos = prefill.seqs[i].num_tokens;
      s.token_begin = int32_t(b.tokens.size());
      s.num_tokens = 4;
      s.num_draft = 3;
      s.sample_index = 1;
      b.tokens.push_back(first.samples[i].token);
      for (int d = 0; d < 3; ++d) b.tokens.push_back((int32_t(i) * 11 + d * 7 + 1) % V);
      if (b.params[i].uses_penalties()) {
        s.prompt_history_begin = int32_t(b.history_tokens.size());
        s.prompt_history_len = prefill.seqs[i].num_tokens;
        for (int t = 0; t < s.prompt_history_len; ++t) b.history_tokens.push_back(token(int(i), t));
        s.output_history_begin = int32_t(b.history_tokens.size());
        s.output_history_len = 1;
        b.history_tokens.push_back(first.samples[i].token);
        b.history_tokens.insert(b.history_tokens.end(), b.tokens.end() - 3, b.tokens.end());
      }
    }
    if (round == 1)
      for (size_t i = 0; i < 3; ++i) b.tokens[b.seqs[i].token_begin + 1] = drawn_first[i];
    const StepOutput out = be.forward(b);
    ASSERT_EQ(out.num_accepted.size(), 3u);
    ASSERT_EQ(out.logits_rows, 12);
    size_t next = 0;
    for (size_t i = 0; i < 3; ++i) {
      SCOPED_TRACE(::testing::Message() << "round " << round << " sequence " << i);
      std::vector<SampledToken> want;
      const std::span<const float> rows(out.logits.data() + i * 4 * size_t(V), 4 * size_t(V));
      const int32_t accepted = sample_sequence(b, b.seqs[i], rows, want);
      EXPECT_EQ(out.num_accepted[i], accepted);
      ASSERT_EQ(want.size(), size_t(accepted) + 1);
      for (size_t k = 0; k < want.size(); ++k) EXPECT_EQ(out.samples[next + k].token, want[k].token);
      drawn_first[i] = want[0].token;
      next += want.size();
      if (round == 1) {
        EXPECT_GE(accepted, 1) << "the first draft is the token drawn there";
      }
      accepted_total += accepted;
    }
    EXPECT_EQ(next, out.samples.size());
  }
  std::printf("CUDA backend: drafted steps, %d drafts accepted, every draw the host's\n", accepted_total);
}

}  // namespace
}  // namespace orchid::runtime::cuda
