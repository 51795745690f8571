#include "runtime/lockstep.h"

#include "core/error.h"
#include "runtime/rank_threads.h"

namespace orchid::runtime {

std::vector<StepOutput> forward_together(std::span<const std::shared_ptr<Backend>> replicas,
                                         std::span<const StepBatch* const> batches) {
  ORCHID_CHECK(!replicas.empty() && batches.size() == replicas.size(), "{} batches for {} replicas",
               batches.size(), replicas.size());
  // Independent replicas may run together too; lockstep ones only all of them (a subset would wait forever).
  const int32_t lockstep = replicas[0]->lockstep_replicas();
  ORCHID_CHECK(lockstep == 1 || size_t(lockstep) == replicas.size(),
               "{} replicas, of which the first steps with {}", replicas.size(), lockstep);
  const StepBatch none;
  std::vector<StepOutput> out(replicas.size());
  // Nothing to abort on a failure: a replica whose ranks fail aborts the collectives they share.
  run_on_rank_threads(
      replicas.size(), [&](size_t i) { out[i] = replicas[i]->forward(batches[i] ? *batches[i] : none); },
      [](size_t) {});
  return out;
}

LeadReplica::LeadReplica(std::vector<std::shared_ptr<Backend>> replicas) : replicas_(std::move(replicas)) {
  ORCHID_CHECK(!replicas_.empty(), "no replicas");
}

StepOutput LeadReplica::forward(const StepBatch& batch) {
  if (!together()) return lead().forward(batch);
  std::vector<const StepBatch*> batches(replicas_.size(), nullptr);
  batches[0] = &batch;
  return std::move(forward_together(replicas_, batches)[0]);
}

KvPages LeadReplica::read_kv(std::span<const int32_t> full_pages, std::span<const int32_t> sliding_pages,
                             int32_t first_sliding_page, int32_t num_tokens) {
  return lead().read_kv(full_pages, sliding_pages, first_sliding_page, num_tokens);
}

void LeadReplica::write_kv(const KvPages& kv, std::span<const int32_t> full_pages,
                           std::span<const int32_t> sliding_pages) {
  lead().write_kv(kv, full_pages, sliding_pages);
}

std::vector<float> LeadReplica::run_layer(int64_t layer, const std::vector<float>& x, int64_t n,
                                          std::vector<int32_t>* topk) {
  if (!together()) return lead().run_layer(layer, x, n, topk);
  std::vector<float> y;
  const std::vector<float> none;
  run_on_rank_threads(
      replicas_.size(),
      [&](size_t i) {
        if (i == 0)
          y = lead().run_layer(layer, x, n, topk);
        else
          replicas_[i]->run_layer(layer, none, 0, nullptr);
      },
      [](size_t) {});
  return y;
}

}  // namespace orchid::runtime
