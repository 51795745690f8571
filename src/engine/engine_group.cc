#include "engine/engine_group.h"

#include <algorithm>

#include "core/error.h"

namespace orchid::engine {

EngineConfig EngineGroup::group_engine_config(EngineConfig base, int index, int count,
                                              std::shared_ptr<StepRound> round) {
  ORCHID_CHECK(!round || round->size() == count, "a step round of {} for {} engines", round->size(), count);
  base.first_id = index + 1;
  base.id_stride = count;
  base.lockstep = std::move(round);
  if (base.seed) base.seed = *base.seed + uint64_t(index);  // distinct default seeds per replica
  return base;
}

EngineGroup::EngineGroup(std::vector<std::shared_ptr<Engine>> engines) : engines_(std::move(engines)) {
  ORCHID_CHECK(!engines_.empty(), "an engine group needs engines");
  for (size_t i = 0; i < engines_.size(); ++i)
    ORCHID_CHECK(engines_[i]->config().first_id == int64_t(i) + 1 &&
                     engines_[i]->config().id_stride == int64_t(engines_.size()) &&
                     engines_[i]->config().lockstep == engines_[0]->config().lockstep,
                 "engine {} of the group was not configured by group_engine_config", i);
}

std::shared_ptr<RequestStream> EngineGroup::submit(RequestSpec spec) {
  size_t best = 0;
  int64_t load = engines_[0]->outstanding();
  for (size_t i = 1; i < engines_.size(); ++i) {
    const int64_t l = engines_[i]->outstanding();
    if (l < load) {
      best = i;
      load = l;
    }
  }
  return engines_[best]->submit(std::move(spec));
}

void EngineGroup::abort(int64_t id) {
  if (id < 1) return;
  engines_[size_t((id - 1) % int64_t(engines_.size()))]->abort(id);
}

EngineMetrics EngineGroup::metrics() const {
  EngineMetrics sum;
  for (size_t i = 0; i < engines_.size(); ++i) {
    const EngineMetrics m = engines_[i]->metrics();
    if (i == 0) {
      sum = m;
      continue;
    }
    sum.num_waiting += m.num_waiting;
    sum.num_running += m.num_running;
    sum.kv_full_pages_total += m.kv_full_pages_total;
    sum.kv_full_pages_used += m.kv_full_pages_used;
    sum.kv_full_pages_cached += m.kv_full_pages_cached;
    sum.kv_sliding_pages_total += m.kv_sliding_pages_total;
    sum.kv_sliding_pages_used += m.kv_sliding_pages_used;
    sum.kv_sliding_pages_cached += m.kv_sliding_pages_cached;
    sum.generation_tokens_per_s += m.generation_tokens_per_s;
    sum.prompt_tokens_per_s += m.prompt_tokens_per_s;
    sum.steps += m.steps;
    sum.requests_submitted += m.requests_submitted;
    sum.requests_finished += m.requests_finished;
    sum.requests_aborted += m.requests_aborted;
    sum.requests_failed += m.requests_failed;
    sum.prompt_tokens += m.prompt_tokens;
    sum.generation_tokens += m.generation_tokens;
    sum.preemptions += m.preemptions;
    sum.prefix_query_tokens += m.prefix_query_tokens;
    sum.prefix_hit_tokens += m.prefix_hit_tokens;
    sum.kv_evictions += m.kv_evictions;
    sum.kv_imported_tokens += m.kv_imported_tokens;
    sum.kv_import_bytes += m.kv_import_bytes;
    sum.kv_export_bytes += m.kv_export_bytes;
    sum.kv_shared_exports += m.kv_shared_exports;
    sum.kv_shared_imports += m.kv_shared_imports;
    sum.kv_share_leases += m.kv_share_leases;
    sum.spec_drafts += m.spec_drafts;
    sum.spec_draft_tokens += m.spec_draft_tokens;
    sum.spec_accepted_tokens += m.spec_accepted_tokens;
    sum.time_to_first_token.merge(m.time_to_first_token);
    sum.inter_token_latency.merge(m.inter_token_latency);
    sum.step_time.merge(m.step_time);
    sum.queue_time.merge(m.queue_time);
    sum.step_schedule_seconds += m.step_schedule_seconds;
    sum.step_backend_host_seconds += m.step_backend_host_seconds;
    sum.step_device_wait_seconds += m.step_device_wait_seconds;
    sum.step_outputs_seconds += m.step_outputs_seconds;
    sum.pipelined_steps += m.pipelined_steps;
  }
  return sum;
}

int32_t EngineGroup::max_model_len() const {
  int32_t v = engines_[0]->max_model_len();
  for (const auto& e : engines_) v = std::min(v, e->max_model_len());
  return v;
}

int64_t EngineGroup::outstanding() const {
  int64_t n = 0;
  for (const auto& e : engines_) n += e->outstanding();
  return n;
}

void EngineGroup::stop() {
  for (auto& e : engines_) e->stop();
}

}  // namespace orchid::engine
