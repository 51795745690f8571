// The engines of the commands that serve requests (serve, generate): one engine per backend (the --dp
// replicas) behind one engine::ServingEngine, started. Replicas that share the experts
// (Backend::lockstep_replicas() > 1) step in lockstep through one engine::StepRound.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "engine/engine.h"
#include "engine/serving_engine.h"
#include "runtime/backend.h"

namespace orchid::cli {

// `config_for(backend)`: each engine's configuration (its proposer may need its backend); ids, seeds and
// the step round are set here. One backend: the engine itself; several: an engine::EngineGroup.
std::shared_ptr<engine::ServingEngine> start_engines(
    const std::vector<std::shared_ptr<runtime::Backend>>& backends,
    const std::function<engine::EngineConfig(runtime::Backend&)>& config_for);

}  // namespace orchid::cli
