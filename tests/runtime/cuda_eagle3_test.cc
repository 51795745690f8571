// The CUDA backend's EAGLE-3 head against tools/golden/make_eagle3_golden.py (the drafts transformers'
// hidden states give on the golden tiny checkpoint with the golden head), as cpu_eagle3_test.cc checks the
// CPU backend's: after a prompt in one step, and in chunks batched with other prompts (the pending row
// across a chunk boundary). The GPU runs BF16, so a draft is compared while the FP32 reference and the same
// chain fed by transformers' BF16 target (tools/golden/eagle3_bf16_drafts.py -> bf16_drafts.json) agree with
// margins above BF16 noise; the first draft where they don't ends the comparison for that prompt. Then a
// verify step replayed from a CUDA graph (every sequence 1 + 5 tokens, the drafts as proposals) keeps what
// the CPU backend keeps from the same steps and proposes the same first token.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../kernels/gpu_test_util.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/cuda/cuda_backend.h"

namespace orchid::runtime::cuda {
namespace {

const std::string kDir = std::string(ORCHID_SOURCE_DIR) + "/tests/golden/eagle3_tiny";
const std::string kTarget = std::string(ORCHID_SOURCE_DIR) + "/tests/golden/tiny/checkpoint";
// Logit margins below this may flip between BF16 implementations (bf16_drafts.json: BF16 moves this head's
// logits by 0.03-0.05 where the target routes alike).
constexpr double kBf16Margin = 0.05;

struct Case {
  std::vector<int32_t> prompt;
  int32_t target_next = 0;
  std::vector<int32_t> drafts;
  // Drafts a BF16 backend is held to: the reference's, up to the first where the BF16 chain disagrees or
  // either margin is below kBf16Margin.
  size_t comparable = 0;
};

std::vector<Case> cases() {
  std::ifstream f(kDir + "/reference.json"), fb(kDir + "/bf16_drafts.json");
  const auto j = nlohmann::json::parse(f), bf = nlohmann::json::parse(fb);
  std::vector<Case> out;
  for (const auto& c : j.at("cases"))
    out.push_back({c.at("prompt").get<std::vector<int32_t>>(), c.at("target_next").get<int32_t>(),
                   c.at("drafts").get<std::vector<int32_t>>(), 0});
  std::vector<bool> parted(out.size(), false);
  for (const auto& r : bf) {  // rows in prompt, draft order
    const size_t i = r.at("prompt").get<size_t>();
    const bool ok = r.at("reference") == r.at("bf16_target") && r.at("margin").get<double>() >= kBf16Margin &&
                    r.at("bf16_margin").get<double>() >= kBf16Margin;
    if (!ok) parted[i] = true;
    if (!parted[i]) ++out[i].comparable;
  }
  return out;
}

std::unique_ptr<CudaBackend> gpu_backend() {
  CudaBackendOptions o;
  o.weights = "bf16";
  o.page_size = 4;
  o.kv_pages = 64;
  o.max_step_tokens = 256;
  o.max_step_seqs = 8;
  o.max_model_len = 64;
  o.max_draft_tokens = 5;
  o.gpu_memory_utilization = 0.3;
  o.eagle3_head = kDir + "/head";
  return std::make_unique<CudaBackend>(kTarget, o);
}

// Sequence `id` of a batch: `tokens` at positions begin.., pages 16 id.. of both pools; sampled (greedy)
// with `drafts` of its tokens being proposals and 5 proposals asked for when `sample`.
void add(StepBatch& b, int64_t id, const std::vector<int32_t>& tokens, int32_t begin, bool sample,
         int32_t drafts = 0) {
  StepSequence s;
  s.seq_id = id;
  s.token_begin = b.num_tokens();
  s.num_tokens = int32_t(tokens.size());
  s.start_pos = begin;
  s.num_draft = drafts;
  s.full_table_begin = s.sliding_table_begin = int32_t(b.full_page_table.size());
  for (int32_t p = 0; p < 16; ++p) {
    b.full_page_table.push_back(int32_t(id) * 16 + p);
    b.sliding_page_table.push_back(int32_t(id) * 16 + p);
  }
  s.num_full_pages = s.num_sliding_pages = 16;
  b.tokens.insert(b.tokens.end(), tokens.begin(), tokens.end());
  if (sample) {
    s.sample = true;
    s.num_propose = 5;
    s.params_index = int32_t(b.params.size());
    SamplingParams p;
    p.temperature = 0.0f;
    b.params.push_back(p);
  }
  b.seqs.push_back(s);
}

std::vector<int32_t> drafts_of(const StepOutput& out, size_t i) {
  size_t at = 0;
  for (size_t j = 0; j < i; ++j) at += size_t(out.num_proposals[j]);
  return {out.proposals.begin() + ptrdiff_t(at),
          out.proposals.begin() + ptrdiff_t(at) + out.num_proposals[i]};
}

// Compares the comparable drafts; returns how many were compared.
int expect_drafts(const std::vector<int32_t>& got, const Case& c, const std::string& what) {
  EXPECT_EQ(got.size(), c.drafts.size()) << what;
  int compared = 0;
  for (size_t j = 0; j < std::min(got.size(), c.comparable); ++j) {
    EXPECT_EQ(got[j], c.drafts[j]) << what << ", draft " << j;
    ++compared;
  }
  return compared;
}

std::vector<int32_t> slice(const std::vector<int32_t>& v, int32_t b, int32_t e) {
  return {v.begin() + b, v.begin() + e};
}

TEST(CudaEagle3, DraftsEqualTheReferenceFromTransformersHiddenStates) {
  ORCHID_REQUIRE_GPU_OR_SKIP();
  const std::vector<Case> cs = cases();
  ASSERT_EQ(cs.size(), 3u);
  auto be = gpu_backend();
  EXPECT_EQ(be->max_proposals(), 5);
  int compared = 0;
  for (size_t i = 0; i < cs.size(); ++i) {
    StepBatch b;
    add(b, int64_t(i), cs[i].prompt, 0, true);
    const StepOutput out = be->forward(b);
    ASSERT_EQ(out.samples.size(), 1u);
    EXPECT_EQ(out.samples[0].token, cs[i].target_next);
    ASSERT_EQ(out.num_proposals.size(), 1u);
    compared += expect_drafts(drafts_of(out, 0), cs[i], "prompt " + std::to_string(i));
  }
  EXPECT_EQ(compared, 7);  // 1, 1 and 5 drafts of the three prompts (bf16_drafts.json)
}

TEST(CudaEagle3, ChunkedAndBatchedPromptsGiveTheSameDrafts) {
  ORCHID_REQUIRE_GPU_OR_SKIP();
  const std::vector<Case> cs = cases();
  auto be = gpu_backend();
  for (int chunk = 0; chunk < 3; ++chunk) {
    StepBatch b;
    for (size_t i = 0; i < cs.size(); ++i) {
      const int32_t n = int32_t(cs[i].prompt.size());
      const int32_t begin = chunk * n / 3, end = (chunk + 1) * n / 3;
      add(b, int64_t(i), slice(cs[i].prompt, begin, end), begin, chunk == 2);
    }
    const StepOutput out = be->forward(b);
    if (chunk < 2) {
      EXPECT_TRUE(out.num_proposals.empty());
      continue;
    }
    ASSERT_EQ(out.num_proposals.size(), cs.size());
    for (size_t i = 0; i < cs.size(); ++i) {
      EXPECT_EQ(out.samples[i].token, cs[i].target_next);
      expect_drafts(drafts_of(out, i), cs[i], "chunked prompt " + std::to_string(i));
    }
  }
}

// Step 1: every prompt (eager). Step 2: each sequence's new token and its 5 proposals, verified in a graphed
// step (1 + 5 tokens a sequence), 5 new proposals asked for. The CPU backend (fp32) runs the same steps.
TEST(CudaEagle3, GraphedVerifyStepsKeepAndProposeWhatTheCpuBackendDoes) {
  ORCHID_REQUIRE_GPU_OR_SKIP();
  const std::vector<Case> cs = cases();
  auto gpu = gpu_backend();
  cpu::CpuBackendOptions co;
  co.page_size = 4;
  co.num_full_pages = co.num_sliding_pages = 64;
  co.eagle3_head = kDir + "/head";
  auto cpu_be = cpu::CpuBackend::create(kTarget, co);
  StepBatch b1;
  for (size_t i = 0; i < cs.size(); ++i) add(b1, int64_t(i), cs[i].prompt, 0, true);
  const StepOutput g1 = gpu->forward(b1), c1 = cpu_be->forward(b1);
  StepBatch b2;
  for (size_t i = 0; i < cs.size(); ++i) {
    std::vector<int32_t> t = {c1.samples[i].token};
    const std::vector<int32_t> d = drafts_of(c1, i);
    t.insert(t.end(), d.begin(), d.end());
    add(b2, int64_t(i), t, int32_t(cs[i].prompt.size()), true, int32_t(d.size()));
  }
  b2.logits = LogitsMode::kNone;
  const StepOutput c2 = cpu_be->forward(b2);
  for (int run = 0; run < 2; ++run) {  // the first run of a graph key is eager, then captured and replayed
    // The same step again: it rewrites the same positions with the same K/V.
    const StepOutput g2 = gpu->forward(b2);
    ASSERT_EQ(g2.num_accepted.size(), cs.size());
    ASSERT_EQ(g2.num_proposals.size(), cs.size());
    for (size_t i = 0; i < cs.size(); ++i) {
      EXPECT_EQ(g2.num_accepted[i], c2.num_accepted[i]) << "sequence " << i << ", run " << run;
      const std::vector<int32_t> got = drafts_of(g2, i), want = drafts_of(c2, i);
      ASSERT_EQ(got.size(), want.size());
      ASSERT_FALSE(got.empty());
      EXPECT_EQ(got[0], want[0]) << "sequence " << i << ", run " << run;
    }
  }
}

}  // namespace
}  // namespace orchid::runtime::cuda
