// A Backend that replays scripted Harmony output instead of running a model, so tests can drive the whole
// server (engine, detokenizer, Harmony parser, API mapping, SSE) with known reasoning and tool calls.
//
// A replay file is JSON:
//   {"rules": [{"match": "Paris", "output": "<|channel|>analysis<|message|>...<|call|>"}, ...],
//    "step_delay_ms": 0, "load_delay_ms": 0, "prompt_log": "/path/prompts.jsonl"}
// Each request's prompt is decoded to text and the rule whose `match` occurs latest in it is replayed (a
// rule with an empty match is the fallback), so a follow-up turn that ends with a tool result can pick a
// different script than the turn that made the call. Output text is tokenized with special tokens allowed.
// Tokens are kept in paged storage read back through the batch's page tables, like a model's KV cache, so
// prefix caching and chunked prefill work as with a real model. After the script the rule's last token
// (normally a stop token) repeats. Steps launched for asynchronous scheduling (Backend::launch) are computed
// at once but become ready step_delay_ms after the step before them is, as on a device that runs them back
// to back, so the engine's and server's host work can overlap the "device" as on a GPU.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <fstream>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "model/config.h"
#include "runtime/backend.h"
#include "tokenizer/tokenizer.h"

namespace orchid::server::testing {

struct ReplayRule {
  std::string match;
  std::vector<int32_t> output;
};

struct ReplayOptions {
  std::vector<ReplayRule> rules;
  int32_t step_delay_ms = 0;  // sleep in every forward step (slow models, disconnect tests)
  int32_t load_delay_ms = 0;  // sleep when loading (tests of 503 while loading)
  std::string prompt_log;     // when set: one JSON line {"prompt": [ids]} per request, at its first sample
  runtime::KvCacheSpec kv{
      .page_size = 16, .num_full_pages = 8192, .num_sliding_pages = 0, .sliding_window = 0};
};

// Throws orchid::Error naming the file and field for a malformed replay file.
ReplayOptions load_replay_file(const std::string& path, const tokenizer::Tokenizer& tok);

class ReplayBackend : public runtime::Backend {
 public:
  ReplayBackend(ReplayOptions options, std::shared_ptr<const tokenizer::Tokenizer> tok);

  std::string name() const override { return "replay"; }
  const model::ModelConfig& model_config() const override { return config_; }
  runtime::KvCacheSpec kv_spec() const override { return options_.kv; }
  runtime::StepOutput forward(const runtime::StepBatch& batch) override;
  void launch(const runtime::StepBatch& batch) override;
  runtime::StepOutput collect() override;
  bool launches_async() const override { return true; }

 private:
  using Clock = std::chrono::steady_clock;
  const ReplayRule* select(const std::vector<int32_t>& prompt) const;
  runtime::StepOutput compute(const runtime::StepBatch& batch);  // forward() without the delay

  ReplayOptions options_;
  std::shared_ptr<const tokenizer::Tokenizer> tok_;
  model::ModelConfig config_;
  std::vector<int32_t> pages_;  // [page * page_size + offset] -> token id
  std::unordered_map<int64_t, const ReplayRule*> chosen_;
  std::ofstream log_;
  struct Launched {
    runtime::StepOutput out;
    Clock::time_point ready;
  };
  std::deque<Launched> launched_;
  std::vector<int32_t> last_tokens_;  // what the last launched step drew
  Clock::time_point device_free_{};   // when the last launched step is ready
};

}  // namespace orchid::server::testing
