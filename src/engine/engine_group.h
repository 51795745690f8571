// Data parallelism at the server: N engines (each with its own backend, KV cache and scheduler) behind one
// endpoint. A request goes to the engine with the fewest outstanding requests (ties: the lowest index);
// engine i hands out ids i+1, i+1+N, ... so an id names its engine. Metrics are the engines' sums.
//
// When the engines' backends share collectives (attention replicas sharing the MoE's expert ranks:
// Backend::lockstep_replicas() == N), the engines step in lockstep through one StepRound (step_round.h):
// each still runs its own loop thread, and every step waits until all have scheduled theirs; an engine with
// nothing to do then runs an empty step. Stopping the group (or any of its engines) stops them all.
#pragma once

#include <memory>
#include <vector>

#include "engine/engine.h"
#include "engine/serving_engine.h"

namespace orchid::engine {

class EngineGroup final : public ServingEngine {
 public:
  // Each engine's config must come from group_engine_config(base, i, N, round), with one round for all (or
  // none).
  explicit EngineGroup(std::vector<std::shared_ptr<Engine>> engines);
  // `round`: the group's StepRound when its engines step in lockstep (make it with StepRound(count)).
  static EngineConfig group_engine_config(EngineConfig base, int index, int count,
                                          std::shared_ptr<StepRound> round = nullptr);

  std::shared_ptr<RequestStream> submit(RequestSpec spec) override;
  void abort(int64_t id) override;
  EngineMetrics metrics() const override;
  int32_t max_model_len() const override;
  int64_t outstanding() const override;
  int32_t vocab_size() const override { return engines_[0]->vocab_size(); }
  std::string kv_share_transport() const override { return engines_[0]->kv_share_transport(); }
  int32_t kv_ranks() const override { return engines_[0]->kv_ranks(); }
  // Lease ids are unique in the process: the engine that exported it takes it.
  bool release_kv_share(uint64_t lease) override {
    for (const auto& e : engines_)
      if (e->release_kv_share(lease)) return true;
    return false;
  }
  // Any engine may be given the request.
  void open_kv_share(const runtime::KvShare& share) override {
    for (const auto& e : engines_) e->open_kv_share(share);
  }
  void stop() override;
  size_t size() const { return engines_.size(); }
  Engine& engine(size_t i) { return *engines_[i]; }

 private:
  std::vector<std::shared_ptr<Engine>> engines_;
};

}  // namespace orchid::engine
