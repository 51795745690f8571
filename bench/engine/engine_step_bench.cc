// Per-step CPU overhead of the engine with a backend that answers instantly: decode steps of N running
// sequences of L tokens each (page 16, sliding window 128, prefix caching on). Two figures:
//  - SchedulerStep: scheduler + block manager alone (plan the step, build the StepBatch, commit pages);
//  - EngineStep: the whole Engine::step (plus inbox, stop checks, one event per sequence, metrics); with a
//    third argument of 1 every request has the server's text decoder (o200k incremental detokenizer), as
//    the OpenAI endpoints give it, and a stop string that never matches (the server's per-token checks).
// Run: build/cpu/bench/engine/engine_bench --benchmark_filter='/512/8192'
#include <benchmark/benchmark.h>

#include <limits>
#include <random>

#include "engine/engine.h"
#include "engine/scheduler.h"
#include "engine/testing/fake_backend.h"
#include "tokenizer/engine_text_decoder.h"

namespace orchid::engine {
namespace {

constexpr int32_t kPage = 16, kWindow = 128, kVocab = 1024, kSteps = 2000;

runtime::KvCacheSpec bench_spec(int32_t seqs, int32_t len) {
  // Room for the prompt plus every step the benchmark may run.
  const int32_t pages_per_seq = (len + 2 * kSteps) / kPage + 2;
  return {.page_size = kPage,
          .num_full_pages = seqs * pages_per_seq,
          .num_sliding_pages = seqs * (kWindow / kPage + 1) + 8192 / kPage + kWindow / kPage + 2,
          .sliding_window = kWindow};
}

std::vector<int32_t> random_prompt(std::mt19937& rng, int32_t len) {
  std::vector<int32_t> t(static_cast<size_t>(len));
  for (auto& id : t) id = 1 + int32_t(rng() % (kVocab - 1));
  return t;
}

void BM_SchedulerStep(benchmark::State& state) {
  const int32_t seqs = int32_t(state.range(0)), len = int32_t(state.range(1));
  BlockManager blocks(bench_spec(seqs, len), /*prefix_caching=*/true);
  SchedulerConfig config;
  config.max_num_seqs = seqs;
  config.max_num_batched_tokens = 8192;
  Scheduler scheduler(config, &blocks);
  std::mt19937 rng(1);
  for (int32_t i = 0; i < seqs; ++i) {
    StopConfig stop;
    stop.max_tokens = std::numeric_limits<int32_t>::max();
    auto seq = std::make_unique<Sequence>(i + 1, StopChecker(stop, nullptr));
    seq->tokens = random_prompt(rng, len);
    seq->prompt_len = len;
    seq->arrival = uint64_t(i);
    seq->params.temperature = 0;
    scheduler.add(std::move(seq));
  }
  std::vector<ScheduledSeq> plan;
  const runtime::StepBatch& batch = scheduler.batch();
  auto run_step = [&] {
    scheduler.schedule(plan);
    for (const ScheduledSeq& e : plan) {
      scheduler.complete(e);
      if (e.sample) e.seq->tokens.push_back(1 + int32_t(e.seq->tokens.size() % (kVocab - 1)));
    }
  };
  // Prefill everything first, until all sequences decode.
  while (scheduler.num_waiting() > 0 || plan.size() < size_t(seqs) || batch.num_tokens() != seqs) run_step();
  for (auto _ : state) run_step();
  state.counters["seqs_in_step"] = double(batch.seqs.size());
  state.counters["full_pages_used"] = blocks.full_pool().num_used();
}

void BM_EngineStep(benchmark::State& state) {
  const int32_t seqs = int32_t(state.range(0)), len = int32_t(state.range(1));
  const bool text = state.range(2) != 0;
  const auto tok = text ? tokenizer::Tokenizer::builtin() : nullptr;
  testing::FakeBackendOptions o;
  o.simulate = false;
  o.vocab_size = kVocab;
  o.kv = bench_spec(seqs, len);
  o.max_position = 1 << 30;
  EngineConfig config;
  config.max_num_seqs = seqs;
  config.max_num_batched_tokens = 8192;
  auto fake = std::make_shared<testing::FakeBackend>(o);
  Engine engine(fake, config);
  std::mt19937 rng(1);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int32_t i = 0; i < seqs; ++i) {
    RequestSpec r;
    r.prompt = random_prompt(rng, len);
    r.sampling.temperature = 0;
    r.ignore_eos = true;
    r.max_tokens = -1;
    if (text) {
      r.decoder = std::make_unique<tokenizer::EngineTextDecoder>(tok);
      r.stop_strings = {"<never in this text>"};
    }
    streams.push_back(engine.submit(std::move(r)));
  }
  auto all_decoding = [&] {
    const auto m = engine.metrics();
    return m.num_running == seqs && m.generation_tokens >= seqs && m.num_waiting == 0;
  };
  while (!all_decoding()) engine.step();
  for (auto& s : streams) s->drain();
  int64_t steps = 0;
  for (auto _ : state) {
    engine.step();
    if (++steps % 64 == 0) {  // consumers live on other threads; keep the queues short
      state.PauseTiming();
      for (auto& s : streams) s->drain();
      state.ResumeTiming();
    }
  }
  state.counters["seqs_in_step"] = double(engine.metrics().num_running);
}

BENCHMARK(BM_SchedulerStep)
    ->Args({512, 8192})
    ->Args({64, 8192})
    ->Args({512, 1024})
    ->Iterations(kSteps)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_EngineStep)
    ->Args({512, 8192, 0})
    ->Args({64, 8192, 0})
    ->Args({256, 1024, 0})
    ->Args({256, 1024, 1})
    ->Args({64, 1024, 1})
    ->Iterations(kSteps)
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace orchid::engine

BENCHMARK_MAIN();
