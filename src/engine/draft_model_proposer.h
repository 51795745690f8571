// Proposals from a smaller model of the same vocabulary (the 1-layer tiny draft for the tiny model, 20b for
// 120b). It keeps its own KV pages per sequence and, each step, first catches up on the tokens the target
// accepted since it last ran (every sequence in one forward, chunked to the draft backend's step limit), then
// drafts one token per forward for all sequences together.
//
// Each draft is drawn with the request's own sampling parameters and the very Philox draw the target will
// make at that output index (coupled sampling): where the two models' distributions agree, the target's draw
// is the draft, so verification (accept while equal) keeps the target's tokens exactly and still accepts as
// often as the models agree. A draft model identical to the target is accepted every time, sampled or not.
//
// Nothing here fails a request: a sequence the draft has no pages or positions for just gets no drafts.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "engine/block_manager.h"
#include "engine/proposer.h"
#include "runtime/backend.h"

namespace orchid::engine {

class DraftModelProposer final : public Proposer {
 public:
  // `max_positions`: the longest sequence the draft backend is asked to hold (its KV pool bounds it too).
  DraftModelProposer(std::shared_ptr<runtime::Backend> draft, int32_t max_positions);
  void propose(std::span<const DraftRequest> requests) override;
  void forget(int64_t seq_id) override;

  int64_t num_forwards() const { return num_forwards_; }
  size_t num_tracked() const { return seqs_.size(); }

 private:
  struct Tracked {
    SeqPages pages;
    std::vector<int32_t> fed;  // the tokens whose K/V the draft's pages hold, in order
  };
  struct Work {
    const DraftRequest* request;
    Tracked* seq;
    std::vector<int32_t> pending;  // to feed before the next draw
  };

  // Feeds every work item's pending tokens (as many forwards as the step limit needs) and draws one draft
  // for each; items the pool cannot hold are dropped (and forgotten).
  void feed_and_draw(std::vector<Work>& work);
  bool reserve(Tracked& t, int32_t start, int32_t end);

  std::shared_ptr<runtime::Backend> backend_;
  runtime::KvCacheSpec spec_;
  int32_t max_positions_;
  BlockManager blocks_;
  std::unordered_map<int64_t, Tracked> seqs_;
  int64_t num_forwards_ = 0;
};

}  // namespace orchid::engine
