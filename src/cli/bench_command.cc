// orchid bench prefill|decode MODEL: the seed's tables (latency or tokens/s, $ per 1M tokens) with the floor
// of every cell (model/cost_model.h). Works on any backend; the numbers that matter come from the GPU.
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <numeric>

#include "cli/backend_options.h"
#include "cli/bench_reference.h"
#include "cli/bench_serve.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/parse.h"
#include "model/cost_model.h"
#include "runtime/lockstep.h"
#include "runtime/sequence_runner.h"
#include "runtime/warm_up.h"

namespace orchid::cli {

namespace {

using Clock = std::chrono::steady_clock;

struct BenchArgs {
  std::string model, lens = "8192,32768,65536,128000", seq_lens = "8192,32768",
                     batches = "1,2,4,8,16,32,64,128";
  int32_t repeats = 3, steps = 8, chunk = 0, gpus = 1;
  double usd_per_gpu_hour = 3.0;
  bool json = false;
  BackendOptions backend;
  // Decode sampling (greedy by default, the seed's setting); anything else runs the sampler every step.
  float temperature = 0.0f, top_p = 1.0f;
  int32_t top_k = 0;
  // Decode: drafts per sequence, a list (speculative decoding's verify step: 1 + K query tokens each).
  std::string draft_tokens = "0";
};

// The middle value, or the mean of the two middle ones for an even count (two repeats: their mean, not the
// slower one, which is the first run at a new length with its one-time costs).
double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : 0.5 * (v[h - 1] + v[h]);
}

std::vector<int64_t> positive_list(const std::string& text, const char* what) {
  auto v = parse_int_list(text, what);
  if (v.empty()) fail("{}: empty list", what);
  for (auto x : v)
    if (x <= 0) fail("{}: {} is not a positive number", what, x);
  return v;
}

std::vector<int32_t> random_ids(int64_t n, int64_t vocab, uint64_t seed) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  uint64_t x = seed;
  for (auto& id : ids) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    id = int32_t((x >> 33) % uint64_t(std::min<int64_t>(vocab, 200000)));
  }
  return ids;
}

void run_prefill(const BenchArgs& a) {
  auto lens = positive_list(a.lens, "--input-lens");
  BackendOptions bo = a.backend;
  bo.max_model_len = std::max(bo.max_model_len, *std::max_element(lens.begin(), lens.end()) + 1);
  auto backend = bo.create(a.model);
  const auto& c = backend->model_config();
  const model::HardwareCeilings hw;
  nlohmann::json rows = nlohmann::json::array();
  // The server's start-up warm-up (module loading, handles, the GEMM library's kernels for long prompts,
  // first-touch of weights), so that the timings are those of a serving instance's requests.
  runtime::warm_up(*backend, 1, bo.max_model_len);
  for (int64_t n : lens) {
    std::vector<double> times;
    for (int r = 0; r < a.repeats; ++r) {
      runtime::SequenceRunner runner(*backend);
      auto ids = random_ids(n, c.vocab_size, 1000 + uint64_t(r));
      const auto t0 = Clock::now();
      runner.feed(ids, true, false, a.chunk);  // returns after the sampled id reached the host
      times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    }
    const double s = median(times);
    const double floor = model::prefill_floor_seconds(c, n, bo.weights, hw);
    nlohmann::json row = {
        {"input_tokens", n},
        {"latency_s", s},
        {"usd_per_1m_tokens", model::usd_per_million_tokens(s, n, a.gpus, a.usd_per_gpu_hour)},
        {"floor_s", floor},
        {"latency_over_floor", s / floor},
        {"tokens_per_s", double(n) / s}};
    if (auto seed = seed_prefill_seconds(c.num_experts, n); seed && c.hidden_size == 2880)
      row["seed_s"] = *seed;
    if (auto peer = peer_prefill_seconds(c.num_experts, n); peer && c.hidden_size == 2880)
      row["peer_s"] = *peer;
    rows.push_back(row);
  }
  nlohmann::json out = {{"bench", "prefill"},    {"model", c.name}, {"backend", backend->name()},
                        {"weights", bo.weights}, {"gpus", a.gpus},  {"rows", rows}};
  if (a.json) {
    std::printf("%s\n", out.dump(2).c_str());
    return;
  }
  std::printf("prefill, batch 1: %s on %s (%s experts), $%.2f per GPU-hour x %d GPU\n", c.name.c_str(),
              backend->name().c_str(), bo.weights.c_str(), a.usd_per_gpu_hour, a.gpus);
  std::printf("| input | latency s | $ / 1M tok | floor s | x floor | seed s | peer s |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  for (const auto& r : rows) {
    auto opt = [&](const char* k) {
      return r.contains(k) ? fmt::format("{:.3f}", r[k].get<double>()) : std::string("-");
    };
    std::printf("| %lld | %.3f | %.4f | %.3f | %.1f | %s | %s |\n",
                (long long)r["input_tokens"].get<int64_t>(), r["latency_s"].get<double>(),
                r["usd_per_1m_tokens"].get<double>(), r["floor_s"].get<double>(),
                r["latency_over_floor"].get<double>(), opt("seed_s").c_str(), opt("peer_s").c_str());
  }
}

// Decode steps of B sequences at context L. Timing only: the KV pages are whatever the pool holds (no prefill
// is run, which at 128 x 32k tokens would dominate the benchmark), the arithmetic and bytes are the real
// ones.
void run_decode(const BenchArgs& a) {
  auto seq_lens = positive_list(a.seq_lens, "--seq-lens");
  auto batches = positive_list(a.batches, "--batch-sizes");
  const auto drafts = parse_int_list(a.draft_tokens, "--draft-tokens");
  if (drafts.empty()) fail("--draft-tokens: empty list");
  for (auto k : drafts)
    if (k < 0 || k > 16) fail("--draft-tokens: {} is not in 0..16", k);
  const int64_t max_k = *std::max_element(drafts.begin(), drafts.end());
  BackendOptions bo = a.backend;
  // Buffers for the drafts' logits and draws; one backend times every K. With an EAGLE-3 head
  // (--speculative-config) every step also runs the head: its catch-up and K drafts a sequence.
  const bool head = a.backend.speculative().method == "eagle3";
  if (head)
    bo.speculative_config = nlohmann::json{{"method", "eagle3"},
                                           {"model", a.backend.speculative().model},
                                           {"num_speculative_tokens", std::max<int64_t>(1, max_k)}}
                                .dump();
  else if (max_k > 0)
    bo.speculative_config = fmt::format(R"({{"method": "ngram", "num_speculative_tokens": {}}})", max_k);
  const int64_t max_len = *std::max_element(seq_lens.begin(), seq_lens.end()) + max_k;
  const int64_t max_batch = *std::max_element(batches.begin(), batches.end());
  bo.max_model_len = std::max(bo.max_model_len, max_len);
  if (!bo.uses_cuda() && bo.kv_pages == 0)  // the CPU sizes its pools from this; the GPU from its memory
    bo.kv_pages = int32_t((max_len + bo.block_size - 1) / bo.block_size * max_batch);
  // --dp N: every replica runs the same batch in each step, together (DP attention's decode: N x B
  // sequences a step).
  const auto replicas = bo.create_replicas(a.model);
  const auto& backend = replicas[0];
  const auto& c = backend->model_config();
  const auto spec = backend->kv_spec();
  const int64_t dp = int64_t(replicas.size());
  // Async scheduling (the CUDA default): plain decode steps (no drafts, one replica) are timed back to back,
  // pipelined.
  const bool pipelined = a.backend.async_scheduling() && dp == 1 && !head;
  const model::HardwareCeilings hw;
  nlohmann::json rows = nlohmann::json::array();
  for (int64_t L : seq_lens) {
    for (int64_t B : batches) {
      for (int64_t K : drafts) {
        const int64_t pages_per_seq = (L + K + spec.page_size - 1) / spec.page_size;
        const int64_t sliding_per_seq =
            std::min<int64_t>(pages_per_seq, (spec.sliding_window + spec.page_size - 1) / spec.page_size + 1);
        nlohmann::json row = {{"seq_len", L}, {"batch", B}, {"draft_tokens", K}};
        if (pages_per_seq * B > spec.num_full_pages || sliding_per_seq * B > spec.num_sliding_pages) {
          row["skipped"] =
              fmt::format("KV needs {} pages, the pool has {}", pages_per_seq * B, spec.num_full_pages);
          rows.push_back(row);
          continue;
        }
        runtime::StepBatch b;
        b.params.emplace_back();
        b.params[0].temperature = a.temperature;
        b.params[0].top_p = a.top_p;
        b.params[0].top_k = a.top_k;
        b.params[0].seed = 1;
        for (int64_t s = 0; s < B; ++s) {
          runtime::StepSequence q;
          q.seq_id = s;
          q.token_begin = int32_t(s * (1 + K));
          q.num_tokens = int32_t(1 + K);
          q.num_draft = int32_t(K);
          q.num_propose = head ? int32_t(K) : 0;
          q.start_pos = int32_t(L - 1);
          q.sample = true;
          q.sample_index = int32_t(s);
          q.full_table_begin = int32_t(b.full_page_table.size());
          q.num_full_pages = int32_t(pages_per_seq);
          for (int64_t p = 0; p < pages_per_seq; ++p)
            b.full_page_table.push_back(int32_t(s * pages_per_seq + p));
          q.sliding_table_begin = int32_t(b.sliding_page_table.size());
          q.num_sliding_pages = int32_t(pages_per_seq);
          for (int64_t p = 0; p < pages_per_seq; ++p) {
            const int64_t k = p - (pages_per_seq - sliding_per_seq);
            b.sliding_page_table.push_back(k < 0 ? runtime::kNoPage : int32_t(s * sliding_per_seq + k));
          }
          for (int64_t t = 0; t <= K; ++t)
            b.tokens.push_back(int32_t((s * 7919 + t * 104729) % std::min<int64_t>(c.vocab_size, 200000)));
          b.seqs.push_back(q);
        }
        const std::vector<const runtime::StepBatch*> batches(replicas.size(), &b);
        auto step_all = [&] {
          if (dp == 1)
            backend->forward(b);
          else
            runtime::forward_together(replicas, batches);
        };
        for (int w = 0; w < 2; ++w) step_all();
        double step = 0;
        if (pipelined && K == 0) {
          // As the engine with --async-scheduling runs them: each step launched while the one before runs,
          // its tokens that step's draws (taken on the device). Steps a second over a run of them.
          runtime::StepBatch next = b;
          for (int64_t s = 0; s < B; ++s) next.from_previous.push_back({int32_t(s), int32_t(s)});
          backend->launch(b);
          const auto t0 = Clock::now();
          for (int r = 0; r < a.steps; ++r) {
            backend->launch(next);
            backend->collect();
          }
          step = std::chrono::duration<double>(Clock::now() - t0).count() / a.steps;
          backend->collect();
          row["pipelined"] = true;
        } else {
          std::vector<double> times;
          for (int r = 0; r < a.steps; ++r) {
            const auto t0 = Clock::now();
            step_all();
            times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
          }
          step = median(times);
        }
        const double floor = model::decode_floor_seconds(c, B, L, bo.weights, hw);
        row["step_s"] = step;
        row["tokens_per_s_per_user"] = 1.0 / step;
        row["tokens_per_s"] = double(dp * B) / step;
        row["usd_per_1m_tokens"] = model::usd_per_million_tokens(step, dp * B, a.gpus, a.usd_per_gpu_hour);
        row["floor_s"] = floor;
        row["step_over_floor"] = step / floor;
        rows.push_back(row);
      }
    }
  }
  nlohmann::json out = {
      {"bench", "decode"},
      {"model", c.name},
      {"backend", backend->name()},
      {"weights", bo.weights},
      {"gpus", a.gpus},
      {"dp", dp},
      {"rows", rows},
      {"sampling", {{"temperature", a.temperature}, {"top_p", a.top_p}, {"top_k", a.top_k}}}};
  if (a.json) {
    std::printf("%s\n", out.dump(2).c_str());
    return;
  }
  std::printf("decode: %s on %s (%s experts), $%.2f per GPU-hour x %d GPU, %s\n", c.name.c_str(),
              backend->name().c_str(), bo.weights.c_str(), a.usd_per_gpu_hour, a.gpus,
              a.temperature <= 0
                  ? "greedy"
                  : fmt::format("temperature {} top-p {} top-k {}", a.temperature, a.top_p, a.top_k).c_str());
  if (dp > 1)
    std::printf(
        "--dp %lld: each of the %lld replicas runs the batch in every step (tok/s total counts them all)\n",
        (long long)dp, (long long)dp);
  if (pipelined)
    std::printf(
        "async scheduling (the CUDA default; --no-async-scheduling: one step at a time): each plain decode "
        "step is launched while the one before runs, as the engine does; step ms = a run of steps / their "
        "number\n");
  if (max_k > 0)
    std::printf(
        "drafts K > 0: speculative decoding's verify step, 1 + K tokens a sequence (tok/s counts one "
        "token a sequence, as if every draft were rejected; the floor is a plain decode step's)\n");
  std::printf(
      "| seq len | batch | drafts | tok/s/user | tok/s total | $ / 1M tok | step ms | floor ms | x floor "
      "|\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  for (const auto& r : rows) {
    if (r.contains("skipped")) {
      std::printf("| %lld | %lld | %lld | - | - | - | - | - | %s |\n", (long long)r["seq_len"].get<int64_t>(),
                  (long long)r["batch"].get<int64_t>(), (long long)r["draft_tokens"].get<int64_t>(),
                  r["skipped"].get<std::string>().c_str());
      continue;
    }
    std::printf("| %lld | %lld | %lld | %.1f | %.1f | %.4f | %.3f | %.3f | %.1f |\n",
                (long long)r["seq_len"].get<int64_t>(), (long long)r["batch"].get<int64_t>(),
                (long long)r["draft_tokens"].get<int64_t>(), r["tokens_per_s_per_user"].get<double>(),
                r["tokens_per_s"].get<double>(), r["usd_per_1m_tokens"].get<double>(),
                1e3 * r["step_s"].get<double>(), 1e3 * r["floor_s"].get<double>(),
                r["step_over_floor"].get<double>());
  }
}

void common_flags(CLI::App* cmd, BenchArgs& a) {
  cmd->add_option("MODEL", a.model, "model directory or synthetic:tiny|20b|120b[@seed]")->required();
  cmd->add_option("--gpus", a.gpus, "GPUs counted in $ per 1M tokens")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  cmd->add_option("--usd-per-gpu-hour", a.usd_per_gpu_hour, "price of one GPU-hour")
      ->check(CLI::Range(0.0, 1e6))
      ->capture_default_str();
  cmd->add_flag("--json", a.json, "print JSON instead of a table");
  a.backend.add_flags(cmd);
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  auto* bench = app.add_subcommand(
      "bench", "Benchmarks in the seed's terms (prefill latency, decode speed, $ per 1M tokens)");
  bench->require_subcommand(1);
  auto* prefill = bench->add_subcommand("prefill", "Prefill latency of one sequence per input length");
  common_flags(prefill, *a);
  prefill->add_option("--input-lens", a->lens, "comma-separated input lengths")->capture_default_str();
  prefill->add_option("--repeats", a->repeats, "timed runs per length (median)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  prefill->add_option("--chunk", a->chunk, "prefill chunk in tokens (0: one step)")
      ->check(CLI::Range(0, 1 << 30));
  prefill->callback([a] {
    if (!a->backend.run_as_worker(a->model)) run_prefill(*a);
  });
  auto* decode = bench->add_subcommand("decode", "Decode step time per (sequence length, batch size)");
  common_flags(decode, *a);
  decode->add_option("--seq-lens", a->seq_lens, "comma-separated context lengths")->capture_default_str();
  decode->add_option("--batch-sizes", a->batches, "comma-separated batch sizes")->capture_default_str();
  decode->add_option("--steps", a->steps, "timed steps per cell (median)")
      ->check(CLI::Range(1, 10000))
      ->capture_default_str();
  decode->add_option("--temperature", a->temperature, "sampling temperature (0: greedy)")
      ->check(CLI::Range(0.0, 100.0))
      ->capture_default_str();
  decode->add_option("--top-p", a->top_p, "nucleus sampling")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  decode->add_option("--top-k", a->top_k, "top-k sampling (0: off)")->check(CLI::Range(0, 1 << 30));
  decode
      ->add_option("--draft-tokens", a->draft_tokens,
                   "comma-separated drafts per sequence K (0..16): time speculative decoding's verify step "
                   "(1 + K tokens a sequence; tok/s then counts one token a sequence, as if every draft were "
                   "rejected)")
      ->capture_default_str();
  decode->callback([a] {
    if (!a->backend.run_as_worker(a->model)) run_decode(*a);
  });

  auto s = std::make_shared<ServeBenchOptions>();
  auto* serve = bench->add_subcommand(
      "serve",
      "Load test of an OpenAI-compatible server (orchid serve, vLLM, ...): throughput, TTFT/TPOT/ITL");
  serve->add_option("--url", s->url, "the server, http://HOST:PORT")->capture_default_str();
  serve->add_option("--served-model", s->model, "the requests' model name (default: the server's first)");
  serve->add_option("--api-key", s->api_key, "sent as Authorization: Bearer KEY");
  serve->add_option("--num-prompts", s->num_prompts, "requests to send")
      ->check(CLI::Range(int64_t(1), int64_t(10000000)))
      ->capture_default_str();
  serve->add_option("--input-len", s->input_len, "random prompt length in tokens")
      ->check(CLI::Range(int64_t(1), int64_t(10000000)))
      ->capture_default_str();
  serve->add_option("--output-len", s->output_len, "max_tokens of each request")
      ->check(CLI::Range(int64_t(1), int64_t(10000000)))
      ->capture_default_str();
  serve->add_option("--max-concurrency", s->max_concurrency, "requests in flight at most (0: no limit)")
      ->check(CLI::Range(int64_t(0), int64_t(10000000)))
      ->capture_default_str();
  serve->add_option("--request-rate", s->request_rate, "Poisson arrivals per second (0: all at once)")
      ->check(CLI::Range(0.0, 1e9))
      ->capture_default_str();
  serve->add_option("--dataset", s->dataset, "JSONL prompts: {\"prompt\": text or ids, \"max_tokens\": n}");
  serve->add_option("--seed", s->seed, "seed of the random prompts and arrivals")->capture_default_str();
  serve->add_option("--timeout", s->timeout_s, "seconds per request")
      ->check(CLI::Range(0.001, 1e6))
      ->capture_default_str();
  serve->add_flag("!--no-ignore-eos", s->ignore_eos, "let outputs stop at the end-of-sequence token");
  serve->add_option("--extra-body", s->extra_body,
                    "a JSON object merged into every request, e.g. '{\"guided_json\": {...}}'");
  serve->add_flag("--json", s->json, "print JSON instead of a table");
  serve->callback([s] {
    const int rc = run_serve_bench(*s);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace orchid::cli
