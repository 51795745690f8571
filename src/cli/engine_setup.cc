#include "cli/engine_setup.h"

#include "core/error.h"
#include "engine/engine_group.h"
#include "engine/step_round.h"

namespace orchid::cli {

std::shared_ptr<engine::ServingEngine> start_engines(
    const std::vector<std::shared_ptr<runtime::Backend>>& backends,
    const std::function<engine::EngineConfig(runtime::Backend&)>& config_for) {
  ORCHID_CHECK(!backends.empty(), "no backends");
  const int n = int(backends.size());
  if (n == 1) {
    auto engine = std::make_shared<engine::Engine>(backends[0], config_for(*backends[0]));
    engine->start();
    return engine;
  }
  const int32_t lockstep = backends[0]->lockstep_replicas();
  ORCHID_CHECK(lockstep == 1 || lockstep == n, "{} replicas, of which the first steps with {}", n, lockstep);
  auto round = lockstep > 1 ? std::make_shared<engine::StepRound>(n) : nullptr;
  std::vector<std::shared_ptr<engine::Engine>> engines;
  for (int i = 0; i < n; ++i)
    engines.push_back(std::make_shared<engine::Engine>(
        backends[size_t(i)],
        engine::EngineGroup::group_engine_config(config_for(*backends[size_t(i)]), i, n, round)));
  auto group = std::make_shared<engine::EngineGroup>(std::move(engines));
  for (size_t i = 0; i < group->size(); ++i) group->engine(i).start();
  return group;
}

}  // namespace orchid::cli
