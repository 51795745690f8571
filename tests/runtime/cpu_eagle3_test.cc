// The CPU backend's EAGLE-3 head against tools/golden/make_eagle3_golden.py: on the golden tiny checkpoint
// with the golden head, the drafts proposed after a prompt equal those computed from transformers' hidden
// states (up to the first draft whose top-1/top-2 margin is within fp32 noise), whether the prompt comes in
// one step, in chunks (the head's pending row across a chunk boundary), or batched with other prompts.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "runtime/cpu/cpu_backend.h"

namespace orchid::runtime::cpu {
namespace {

const std::string kDir = std::string(ORCHID_SOURCE_DIR) + "/tests/golden/eagle3_tiny";

struct Case {
  std::vector<int32_t> prompt;
  int32_t target_next = 0;
  std::vector<int32_t> drafts;
  std::vector<double> margins;
};

std::vector<Case> cases() {
  std::ifstream f(kDir + "/reference.json");
  const auto j = nlohmann::json::parse(f);
  std::vector<Case> out;
  for (const auto& c : j.at("cases"))
    out.push_back({c.at("prompt").get<std::vector<int32_t>>(), c.at("target_next").get<int32_t>(),
                   c.at("drafts").get<std::vector<int32_t>>(), c.at("margins").get<std::vector<double>>()});
  return out;
}

std::unique_ptr<CpuBackend> backend() {
  CpuBackendOptions o;
  o.page_size = 4;
  o.num_full_pages = o.num_sliding_pages = 64;
  o.eagle3_head = kDir + "/head";
  return CpuBackend::create(std::string(ORCHID_SOURCE_DIR) + "/tests/golden/tiny/checkpoint", o);
}

// Sequence i of a batch: tokens [begin, end) of its prompt, pages 16 i.. of both pools.
void add(StepBatch& b, int64_t id, const std::vector<int32_t>& prompt, int32_t begin, int32_t end,
         bool last) {
  StepSequence s;
  s.seq_id = id;
  s.token_begin = b.num_tokens();
  s.num_tokens = end - begin;
  s.start_pos = begin;
  s.full_table_begin = s.sliding_table_begin = int32_t(b.full_page_table.size());
  for (int32_t p = 0; p < 16; ++p) {
    b.full_page_table.push_back(int32_t(id) * 16 + p);
    b.sliding_page_table.push_back(int32_t(id) * 16 + p);
  }
  s.num_full_pages = s.num_sliding_pages = 16;
  b.tokens.insert(b.tokens.end(), prompt.begin() + begin, prompt.begin() + end);
  if (last) {
    s.sample = true;
    s.num_propose = 5;
    s.params_index = int32_t(b.params.size());
    SamplingParams p;
    p.temperature = 0.0f;
    b.params.push_back(p);
  }
  b.seqs.push_back(s);
}

// The drafts of sampled sequence `i` of `out`.
std::vector<int32_t> drafts_of(const StepOutput& out, size_t i) {
  size_t at = 0;
  for (size_t j = 0; j < i; ++j) at += size_t(out.num_proposals[j]);
  return {out.proposals.begin() + ptrdiff_t(at),
          out.proposals.begin() + ptrdiff_t(at) + out.num_proposals[i]};
}

void expect_drafts(const std::vector<int32_t>& got, const Case& c, const std::string& what) {
  ASSERT_EQ(got.size(), c.drafts.size()) << what;
  for (size_t j = 0; j < got.size(); ++j) {
    if (c.margins[j] < 1e-4)
      break;  // a near-tie in the reference: either draft is right, and so is what follows
    EXPECT_EQ(got[j], c.drafts[j]) << what << ", draft " << j;
  }
}

TEST(CpuEagle3, DraftsEqualTheReferenceFromTransformersHiddenStates) {
  const std::vector<Case> cs = cases();
  ASSERT_EQ(cs.size(), 3u);
  auto be = backend();
  EXPECT_EQ(be->max_proposals(), 16);
  for (size_t i = 0; i < cs.size(); ++i) {  // one prompt a step
    StepBatch b;
    add(b, int64_t(i), cs[i].prompt, 0, int32_t(cs[i].prompt.size()), true);
    const StepOutput out = be->forward(b);
    ASSERT_EQ(out.samples.size(), 1u);
    EXPECT_EQ(out.samples[0].token, cs[i].target_next);
    ASSERT_EQ(out.num_proposals.size(), 1u);
    expect_drafts(drafts_of(out, 0), cs[i], "prompt " + std::to_string(i));
  }
}

TEST(CpuEagle3, ChunkedAndBatchedPromptsGiveTheSameDrafts) {
  const std::vector<Case> cs = cases();
  auto be = backend();
  // Every prompt in three chunks, the sequences in one batch each step (the first chunks sample nothing:
  // their last rows wait for the next chunk's first token).
  std::vector<int32_t> cut1, cut2;
  for (const Case& c : cs) {
    cut1.push_back(int32_t(c.prompt.size()) / 3);
    cut2.push_back(2 * int32_t(c.prompt.size()) / 3);
  }
  for (int chunk = 0; chunk < 3; ++chunk) {
    StepBatch b;
    for (size_t i = 0; i < cs.size(); ++i) {
      const int32_t n = int32_t(cs[i].prompt.size());
      const int32_t begin = chunk == 0 ? 0 : chunk == 1 ? cut1[i] : cut2[i];
      const int32_t end = chunk == 0 ? cut1[i] : chunk == 1 ? cut2[i] : n;
      add(b, int64_t(i), cs[i].prompt, begin, end, chunk == 2);
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

TEST(CpuEagle3, ProposalsAskedOfABackendWithoutAHeadAreAnError) {
  CpuBackendOptions o;
  o.page_size = 4;
  o.num_full_pages = o.num_sliding_pages = 64;
  auto be = CpuBackend::create(std::string(ORCHID_SOURCE_DIR) + "/tests/golden/tiny/checkpoint", o);
  EXPECT_EQ(be->max_proposals(), 0);
  StepBatch b;
  add(b, 0, cases()[0].prompt, 0, 5, true);
  EXPECT_THROW(be->forward(b), Error);
}

}  // namespace
}  // namespace orchid::runtime::cpu
