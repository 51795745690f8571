// Pipelined steps on the CUDA backend (--async-scheduling): the engine launches decode step N+1, its
// tokens copied on the device from step N's draws, before it reads step N. Every request must get exactly
// the tokens and logprobs it gets with steps run one at a time, through CUDA graphs (arg-max and the GPU
// sampler) and eagerly (banned tokens while min_tokens holds the stop ids back), and the steady part of
// the run must actually be pipelined, structured outputs included (their masks handed over after launch). No
// request ends by a drawn token: such a request has one more step computed (and dropped) when pipelined,
// which changes later batches' shapes and so, on a GPU, the last bits of other rows; the engine's handling of
// that case is tested on the CPU (async_scheduling_test). The same over two ranks sharing the GPU: rank 0
// draws, the other takes the pipelined steps' tokens on the device.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <span>
#include <vector>

#include "../kernels/gpu_test_util.h"
#include "engine/engine.h"
#include "engine/token_constraint.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/warm_up.h"

namespace orchid::runtime::cuda {
namespace {

// Allows only `first`, `first` + 1, ... (a structured output whose every mask follows the draw before it).
class Successor : public engine::TokenConstraint {
 public:
  explicit Successor(int32_t first) : next_(first) {}
  void fill_mask(std::span<uint32_t> mask, int32_t) override {
    std::fill(mask.begin(), mask.end(), 0u);
    mask[size_t(next_) / 32] |= 1u << (next_ % 32);
  }
  bool accept(int32_t token) override { return token == next_++; }

 private:
  int32_t next_;
};

struct Outcome {
  std::vector<engine::RequestEvent> events;
  int64_t pipelined_steps = 0, steps = 0;
};

std::vector<engine::RequestSpec> requests(int32_t vocab) {
  std::vector<engine::RequestSpec> out;
  for (int i = 0; i < 20; ++i) {
    engine::RequestSpec r;
    for (int t = 0; t < 3 + (i * 7) % 23; ++t) r.prompt.push_back((i * 977 + t * 131 + 5) % vocab);
    r.max_tokens = 6 + (i * 5) % 30;
    r.ignore_eos = true;
    r.seed = 100 + uint64_t(i);
    switch (i % 4) {
      case 0:
        r.sampling.temperature = 0;  // arg-max
        break;
      case 1:
        r.sampling.temperature = 0.9f;
        r.sampling.top_k = 40;
        r.sampling.num_logprobs = 3;
        break;
      case 2:
        r.sampling.temperature = 1.0f;
        r.sampling.top_p = 0.8f;
        r.min_tokens = r.max_tokens;  // the stop id stays banned: eager steps, and it never ends the request
        r.stop_token_ids = {(i * 31) % vocab};
        break;
      default:
        r.sampling.temperature = 0;
        r.sampling.num_logprobs = 0;
        break;
    }
    out.push_back(std::move(r));
  }
  return out;
}

Outcome run(bool async, bool graphs, int tp = 1, bool warm = false) {
  CudaBackendOptions o;
  if (tp > 1) {  // ranks sharing this GPU, collectives in-process
    o.parallel = {tp, 1, tp};
    o.share_device = true;
  }
  o.max_step_tokens = 512;
  o.max_step_seqs = 32;
  o.max_model_len = 512;
  o.kv_pages = 256;
  o.gpu_memory_utilization = 0.3;
  o.cuda_graphs = graphs;
  auto backend = std::make_shared<CudaBackend>("synthetic:tiny", o);
  if (warm) {
    const std::vector<int32_t> batches = backend->decode_graph_batches();
    EXPECT_EQ(batches, (graphs ? std::vector<int32_t>{1, 2, 4, 8, 16, 32} : std::vector<int32_t>{}));
    EXPECT_GE(warm_up(*backend), 0.0);
  }
  engine::EngineConfig c;
  c.async_scheduling = async;
  c.max_num_seqs = 32;
  c.max_num_batched_tokens = 512;
  engine::Engine e(backend, c);
  std::vector<std::shared_ptr<engine::RequestStream>> streams;
  for (auto& r : requests(int32_t(backend->model_config().vocab_size)))
    streams.push_back(e.submit(std::move(r)));
  for (int i = 0; i < 2; ++i) {  // structured outputs: masks supplied after launch when pipelined
    engine::RequestSpec r;
    r.prompt = {11, 12, 13 + i};
    r.max_tokens = 20;
    r.ignore_eos = true;
    r.sampling.temperature = 0.7f;
    r.seed = 9;
    r.constraint = std::make_unique<Successor>(1000 + 100 * i);
    if (i == 1) r.sampling.frequency_penalty = 0.5f;  // a masked step forward() runs once its masks come
    streams.push_back(e.submit(std::move(r)));
  }
  e.run_until_idle();
  Outcome out;
  for (auto& s : streams) out.events.push_back(s->wait_all());
  const engine::EngineMetrics m = e.metrics();
  out.pipelined_steps = m.pipelined_steps;
  out.steps = m.steps;
  EXPECT_EQ(m.kv_full_pages_used, 0);
  return out;
}

void expect_pipelined_draws_equal(int tp) {
  for (const bool graphs : {true, false}) {
    const Outcome sync = run(false, graphs, tp), async = run(true, graphs, tp);
    EXPECT_EQ(sync.pipelined_steps, 0);
    EXPECT_GT(async.pipelined_steps, async.steps / 2) << async.pipelined_steps << " of " << async.steps;
    ASSERT_EQ(sync.events.size(), async.events.size());
    for (int i = 0; i < 2; ++i) {  // the constrained requests drew what their masks allowed, in order
      const auto& ev = async.events[async.events.size() - 2 + size_t(i)];
      ASSERT_EQ(ev.token_ids.size(), 20u) << ev.error;
      for (int32_t t = 0; t < 20; ++t) EXPECT_EQ(ev.token_ids[size_t(t)], 1000 + 100 * i + t);
    }
    for (size_t i = 0; i < sync.events.size(); ++i) {
      const auto &a = sync.events[i], &b = async.events[i];
      EXPECT_EQ(a.token_ids, b.token_ids)
          << "request " << i << (graphs ? " (graphs)" : " (eager)") << ", TP" << tp;
      EXPECT_EQ(a.finish, b.finish) << "request " << i;
      ASSERT_EQ(a.logprobs.size(), b.logprobs.size()) << "request " << i;
      for (size_t k = 0; k < a.logprobs.size(); ++k) {
        EXPECT_EQ(a.logprobs[k].logprob, b.logprobs[k].logprob) << "request " << i << " token " << k;
        EXPECT_EQ(a.logprobs[k].top, b.logprobs[k].top) << "request " << i << " token " << k;
      }
    }
  }
}

TEST(CudaAsyncSteps, PipelinedStepsDrawWhatStepsOneAtATimeDraw) {
  ORCHID_REQUIRE_GPU_OR_SKIP();
  expect_pipelined_draws_equal(1);
}

// Two ranks: rank 0 draws, and a pipelined step's tokens reach rank 1 by an all-gather on the device; a
// penalized request's history is rank 0's draws read on the host and shared. (Ranks sharing a GPU
// synchronise at each collective, so this checks what is computed, not the overlap.)
TEST(CudaAsyncSteps, PipelinedStepsOverTwoRanksDrawWhatStepsOneAtATimeDraw) {
  ORCHID_REQUIRE_GPU_OR_SKIP();
  expect_pipelined_draws_equal(2);
}

// The start-up warm-up runs (and captures) the decode steps of every graph batch size on the first pages of
// the pools: the requests served after it draw exactly what they draw on a backend that was not warmed up.
TEST(CudaAsyncSteps, WarmUpOfEveryGraphBatchSizeChangesNoDraw) {
  ORCHID_REQUIRE_GPU_OR_SKIP();
  const Outcome cold = run(true, true), warm = run(true, true, 1, true);
  ASSERT_EQ(cold.events.size(), warm.events.size());
  for (size_t i = 0; i < cold.events.size(); ++i) {
    EXPECT_EQ(cold.events[i].token_ids, warm.events[i].token_ids) << "request " << i;
    ASSERT_EQ(cold.events[i].logprobs.size(), warm.events[i].logprobs.size()) << "request " << i;
    for (size_t k = 0; k < cold.events[i].logprobs.size(); ++k)
      EXPECT_EQ(cold.events[i].logprobs[k].logprob, warm.events[i].logprobs[k].logprob) << "request " << i;
  }
}

}  // namespace
}  // namespace orchid::runtime::cuda
