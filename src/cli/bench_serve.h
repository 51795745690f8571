// `orchid bench serve --url URL`: a load generator for any OpenAI-compatible server (orchid, vLLM, SGLang,
// ...): streamed /v1/completions requests with random token-id prompts of a given length (or prompts from a
// JSONL file), `ignore_eos` so every output has exactly its requested length, sent all at once, at most
// --max-concurrency at a time, or as a Poisson process of --request-rate requests per second. It reports
// request and token throughput, TTFT / TPOT / ITL / end-to-end percentiles, errors, and outputs whose length
// differs from the request.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace orchid::cli {

struct ServeBenchOptions {
  std::string url = "http://127.0.0.1:8000";  // http only
  std::string model;  // the requests' "model" (empty: the server's first /v1/models id)
  std::string api_key;
  int64_t num_prompts = 256;
  int64_t input_len = 128, output_len = 1024;
  int64_t max_concurrency = 0;  // 0: no limit
  double request_rate = 0;      // requests per second, Poisson arrivals; 0: all at once
  std::string dataset;          // JSONL: {"prompt": "text" | [ids], "max_tokens": n (optional)} per line
  int64_t vocab = 199998;  // random prompt ids are drawn from [0, vocab): ordinary tokens of o200k_harmony
  uint64_t seed = 0;
  bool ignore_eos = true;
  std::string extra_body;   // a JSON object merged into every request (e.g. vLLM's guided_json)
  double timeout_s = 3600;  // per request
  bool json = false;
};

// One request's outcome; times in seconds from its send.
struct ServeRequestResult {
  bool ok = false;
  std::string error;
  int64_t prompt_tokens = 0, output_tokens = -1, expected_output = 0;
  double ttft = 0, e2e = 0;
  std::vector<double> itl;  // gaps between streamed chunks
};

// Runs the benchmark and prints the summary (a table, or JSON with --json). Returns the process exit code:
// 0 when every request succeeded with exactly its expected output length.
int run_serve_bench(const ServeBenchOptions& options);

}  // namespace orchid::cli
