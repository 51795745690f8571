// The CPU backend against transformers (FP32) on the golden tiny checkpoint, and against itself across
// batching, chunking, paging and decoding.
#include "runtime/cpu/cpu_backend.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <numeric>
#include <random>

#include "core/error.h"
#include "golden.h"
#include "runtime/sequence_runner.h"
#include "runtime/warm_up.h"

namespace orchid::runtime::cpu {
namespace {

using orchid::testing::Golden;
using orchid::testing::load_golden;

// max |a - b| / max |ref| over the rows given.
double max_rel_diff(const std::vector<float>& a, const std::vector<float>& ref, float ref_max) {
  EXPECT_EQ(a.size(), ref.size());
  double d = 0;
  for (size_t i = 0; i < std::min(a.size(), ref.size()); ++i)
    d = std::max(d, double(std::abs(a[i] - ref[i])));
  return d / ref_max;
}

std::vector<float> run_forward(Backend& b, const std::vector<int32_t>& ids, int32_t chunk) {
  SequenceRunner r(b);
  std::vector<float> logits;
  r.feed(ids, false, true, chunk, &logits);
  return logits;
}

constexpr double kTol = 1e-4;  // max |diff| <= 1e-4 * max |ref|

TEST(CpuBackendGolden, PrefillMatchesTransformersInBothConfigStyles) {
  Golden g = load_golden();
  const std::string v5 = orchid::testing::golden_checkpoint_v5(g);
  for (const std::string& dir : {g.checkpoint, v5}) {
    auto backend = CpuBackend::create(dir);
    ASSERT_EQ(backend->model_config().vocab_size, g.vocab);
    const double err = max_rel_diff(run_forward(*backend, g.sequence(), 0), g.logits, g.max_abs);
    EXPECT_LE(err, kTol) << dir;
    std::printf("prefill vs transformers (%s): max|d|/max|ref| = %.2e\n", dir.c_str(), err);
  }
  std::filesystem::remove_all(v5);
}

TEST(CpuBackendGolden, IncrementalDecodingReproducesEveryPosition) {
  Golden g = load_golden();
  for (int32_t page : {16, 4, 5}) {
    CpuBackendOptions o;
    o.page_size = page;
    auto backend = CpuBackend::create(g.checkpoint, o);
    for (int32_t chunk : {1, 7}) {
      const double err = max_rel_diff(run_forward(*backend, g.sequence(), chunk), g.logits, g.max_abs);
      EXPECT_LE(err, kTol) << "page " << page << " chunk " << chunk;
    }
  }
}

TEST(CpuBackendGolden, GreedyTokensEqualTransformers) {
  Golden g = load_golden();
  const std::string v5 = orchid::testing::golden_checkpoint_v5(g);
  for (const std::string& dir : {g.checkpoint, v5}) {
    auto backend = CpuBackend::create(dir);
    SamplingParams greedy;
    greedy.temperature = 0;
    SequenceRunner r(*backend, greedy);
    auto out = r.feed(g.prompt, true);
    std::vector<int32_t> ids;
    for (size_t i = 0; i < g.greedy.size(); ++i) {
      ids.push_back(out.samples.at(0).token);
      if (i + 1 < g.greedy.size()) out = r.feed({ids.back()}, true);
    }
    EXPECT_EQ(ids, g.greedy) << dir;
  }
  std::filesystem::remove_all(v5);
}

// Several sequences in one step, with scrambled page ids, mixed prefill chunks and decodes, give the same
// logits as each sequence alone; sliding-window pages that left the window may be taken away (kNoPage).
TEST(CpuBackendGolden, BatchingAndPagingDoNotChangeResults) {
  Golden g = load_golden();
  CpuBackendOptions o;
  o.page_size = 4;
  o.num_full_pages = o.num_sliding_pages = 64;
  auto alone = CpuBackend::create(g.checkpoint, o);
  auto batched = CpuBackend::create(g.checkpoint, o);
  const auto& c = batched->model_config();

  std::mt19937 rng(11);
  const int nseq = 3;
  std::vector<std::vector<int32_t>> seqs(nseq);
  for (int s = 0; s < nseq; ++s)
    for (int i = 0; i < 20 + 7 * s; ++i) seqs[size_t(s)].push_back(int32_t(rng() % uint32_t(c.vocab_size)));
  std::vector<std::vector<float>> want(nseq);
  for (int s = 0; s < nseq; ++s) want[size_t(s)] = run_forward(*alone, seqs[size_t(s)], 0);

  // Each sequence owns a disjoint, shuffled set of pages in both pools.
  std::vector<int32_t> pages(64);
  std::iota(pages.begin(), pages.end(), 0);
  std::shuffle(pages.begin(), pages.end(), rng);
  std::vector<std::vector<int32_t>> table(nseq);
  for (int s = 0; s < nseq; ++s)
    table[size_t(s)].assign(pages.begin() + 20 * s, pages.begin() + 20 * (s + 1));

  std::vector<int32_t> done(nseq, 0);
  std::vector<std::vector<float>> got(nseq);
  while (true) {
    StepBatch b;
    b.logits = LogitsMode::kAll;
    b.params.emplace_back();
    std::vector<int> in_step;
    for (int s = 0; s < nseq; ++s) {
      const int32_t len = int32_t(seqs[size_t(s)].size());
      if (done[size_t(s)] == len) continue;
      const int32_t n = std::min<int32_t>(len - done[size_t(s)], 1 + int32_t(rng() % 6));  // chunk or decode
      StepSequence q;
      q.seq_id = s;
      q.token_begin = b.num_tokens();
      q.num_tokens = n;
      q.start_pos = done[size_t(s)];
      const int32_t need = (q.start_pos + n + o.page_size - 1) / o.page_size;
      q.full_table_begin = int32_t(b.full_page_table.size());
      q.sliding_table_begin = int32_t(b.sliding_page_table.size());
      q.num_full_pages = q.num_sliding_pages = need;
      const int32_t window_start = std::max<int32_t>(0, q.start_pos - int32_t(c.sliding_window) + 1);
      for (int32_t p = 0; p < need; ++p) {
        b.full_page_table.push_back(table[size_t(s)][size_t(p)]);
        const bool left_window = (p + 1) * o.page_size <= window_start;  // every position < window start
        b.sliding_page_table.push_back(left_window ? kNoPage : table[size_t(s)][size_t(p)]);
      }
      b.tokens.insert(b.tokens.end(), seqs[size_t(s)].begin() + q.start_pos,
                      seqs[size_t(s)].begin() + q.start_pos + n);
      b.seqs.push_back(q);
      in_step.push_back(s);
    }
    if (b.seqs.empty()) break;
    auto out = batched->forward(b);
    ASSERT_EQ(out.logits_rows, b.num_tokens());
    for (size_t k = 0; k < b.seqs.size(); ++k) {
      const auto& q = b.seqs[k];
      auto first = out.logits.begin() + long(q.token_begin) * c.vocab_size;
      got[size_t(q.seq_id)].insert(got[size_t(q.seq_id)].end(), first,
                                   first + long(q.num_tokens) * c.vocab_size);
      done[size_t(q.seq_id)] += q.num_tokens;
    }
  }
  for (int s = 0; s < nseq; ++s) {
    float mx = 0;
    for (float v : want[size_t(s)]) mx = std::max(mx, std::abs(v));
    EXPECT_LE(max_rel_diff(got[size_t(s)], want[size_t(s)], mx), 1e-6) << "sequence " << s;
  }
}

// The start-up warm-up (serve on the GPU) runs a prompt and decode steps on the first KV pages: afterwards
// the backend computes exactly what a fresh one does.
TEST(CpuBackendGolden, WarmUpLeavesTheBackendAsItWas) {
  Golden g = load_golden();
  auto fresh = CpuBackend::create(g.checkpoint);
  auto warmed = CpuBackend::create(g.checkpoint);
  EXPECT_GE(warm_up(*warmed), 0.0);
  const auto want = run_forward(*fresh, g.sequence(), 0);
  const auto got = run_forward(*warmed, g.sequence(), 0);
  ASSERT_EQ(got.size(), want.size());
  EXPECT_TRUE(got == want) << "logits after the warm-up differ from a fresh backend's";
}

TEST(CpuBackend, BadInputIsAClearError) {
  auto backend = CpuBackend::create("synthetic:tiny");
  SequenceRunner r(*backend);
  try {
    r.feed({1, 2, 300000}, false);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("300000"), std::string::npos) << e.what();
  }
  CpuBackendOptions small;
  small.num_full_pages = small.num_sliding_pages = 2;
  auto tiny = CpuBackend::create("synthetic:tiny", small);
  SequenceRunner r2(*tiny);
  EXPECT_THROW(r2.feed(std::vector<int32_t>(100, 1), false), Error);
  EXPECT_THROW(CpuBackend::create("synthetic:13b"), Error);
  EXPECT_THROW(CpuBackend::create("/nonexistent/model"), Error);
}

}  // namespace
}  // namespace orchid::runtime::cpu
