// The round barrier of engines that step in lockstep: data-parallel attention replicas whose backends share
// collectives (the MoE's expert ranks span the replicas: Backend::lockstep_replicas()), so that every
// replica's forward() must run together with the others'.
//
// Each round, every engine schedules its own step, then arrive()s saying whether it has work. When all have
// arrived, the round runs if any of them has work: every engine then calls forward(), with an empty batch
// when it has nothing, so the backends' collectives always see every replica. A round without work runs
// nothing, and the engines wait_for_work() until a request reaches any of them (notify_work()) or one of
// them arrives at the next round. Each engine keeps its own loop thread, scheduler and KV pools; the group
// only agrees, once per step, on whether the step happens.
//
// close() ends the rounds for good (the group stops, or an engine failed): arrive() then answers kClosed to
// every engine, never to some engines of a round that others already run.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>

namespace orchid::engine {

class StepRound {
 public:
  explicit StepRound(int engines);
  int size() const { return size_; }

  enum class Outcome { kRun, kIdle, kClosed };
  // Blocks until every engine has arrived (or the rounds are closed). kRun: some engine has work, call
  // forward() now; kIdle: nobody has, run nothing.
  Outcome arrive(bool has_work);

  // How many times work was announced. An engine reads it before it looks for work, and passes it to
  // wait_for_work after an idle round: what came in between is not missed.
  uint64_t work_epoch() const;
  // A request or an abort reached some engine of the group.
  void notify_work();
  // Returns once notify_work() was called after `since` was read, another engine arrived at a round, or the
  // rounds were closed.
  void wait_for_work(uint64_t since);

  // Ends the rounds; the first reason is kept (empty: stopped, not failed).
  void close(const std::string& reason = {});
  bool closed() const;
  std::string close_reason() const;

 private:
  const int size_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  bool any_work_ = false;
  uint64_t generation_ = 0;           // rounds completed
  Outcome outcome_ = Outcome::kIdle;  // of the last completed round
  uint64_t epoch_ = 0;
  bool closed_ = false;
  std::string reason_;
};

}  // namespace orchid::engine
