// The engine's state of one request. Owned by the scheduler; touched only on the engine thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "engine/block_manager.h"
#include "engine/request_stream.h"
#include "engine/stop_checker.h"
#include "engine/token_constraint.h"
#include "runtime/sampling_params.h"

namespace orchid::engine {

enum class SeqState : uint8_t { kWaiting, kRunning, kPreempted, kFinished };

struct Sequence {
  using Clock = std::chrono::steady_clock;

  Sequence(int64_t id, StopChecker stop) : id(id), stop(std::move(stop)) {}

  const int64_t id;
  uint64_t arrival = 0;  // submission order
  int32_t priority = 0;
  SeqState state = SeqState::kWaiting;

  std::vector<int32_t> tokens;  // prompt, then outputs
  std::vector<int32_t> draft;   // this step's proposed continuation (speculative decoding)
  int32_t prompt_len = 0;
  int32_t num_computed = 0;  // leading tokens whose K/V are in the cache
  runtime::SamplingParams params;
  StopChecker stop;
  std::shared_ptr<RequestStream> stream;
  SeqPages pages;
  std::unique_ptr<TokenConstraint> constraint;        // structured outputs; null: any token
  bool kv_export = false;                             // RequestSpec::kv_export
  std::string kv_share;                               // RequestSpec::kv_share
  int32_t kv_share_ranks = 0;                         // RequestSpec::kv_share_ranks
  std::shared_ptr<const runtime::KvPages> kv_import;  // until written into the pages at admission
  int32_t import_len = 0;                             // the leading positions kv_import covers here
  std::string constraint_error;                       // the constraint failed this step: the request ends

  bool admitted_once = false;
  int32_t cached_tokens = 0;  // prefix-cache hit at first admission
  int32_t imported_tokens = 0;
  int32_t num_preemptions = 0;
  Clock::time_point arrival_time, last_token_time;
  int32_t plan_slot = -1;  // index in the current step's plan, -1 when not scheduled

  // This sequence's region of the StepBatch page tables (BatchBuilder) and how much of its tables is
  // mirrored there.
  struct TableRegion {
    int32_t begin = -1, capacity = 0;
    int32_t full_synced = 0, sliding_synced = 0, sliding_begin_synced = 0;
  } region;

  // Asynchronous scheduling: what a launched step the engine has not read yet adds. It computes `ahead`
  // positions past num_computed and, when ahead_sample >= 0, draws one token (that step's sample
  // ahead_sample), unknown until it is read. Both 0 / -1 otherwise, and always without pipelining.
  int32_t ahead = 0;
  int32_t ahead_sample = -1;

  int32_t num_outputs() const { return int32_t(tokens.size()) - prompt_len; }
  int32_t remaining() const { return int32_t(tokens.size()) - num_computed; }
  // The same, counting what the launched step adds.
  int32_t computed_ahead() const { return num_computed + ahead; }
  int32_t length_ahead() const { return int32_t(tokens.size()) + (ahead_sample >= 0 ? 1 : 0); }
  int32_t outputs_ahead() const { return length_ahead() - prompt_len; }
  int32_t remaining_ahead() const { return length_ahead() - computed_ahead(); }
  // Scheduling precedence: lower priority value first, then earlier arrival.
  auto precedence() const { return std::tuple(priority, arrival); }
};

}  // namespace orchid::engine
