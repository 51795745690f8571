// Computes the allowed-token masks of a step's constrained sequences on threads of its own (the jobs of a
// step shared among them), so the work overlaps the backend's forward: the engine starts it right before
// forward(), the backend waits for it right before sampling (StepBatch::wait_token_masks), and the engine
// waits again after forward() returns (a backend may fail before sampling) before any constraint is touched
// on the engine thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "engine/token_constraint.h"

namespace orchid::engine {

struct MaskJob {
  TokenConstraint* constraint = nullptr;
  int32_t remaining = 0;
  std::span<uint32_t> row;
};

class MaskWorker {
 public:
  // 0 threads: one per hardware thread, at most 8.
  explicit MaskWorker(int32_t threads = 0);
  ~MaskWorker();
  MaskWorker(const MaskWorker&) = delete;
  MaskWorker& operator=(const MaskWorker&) = delete;

  // Starts the jobs (the previous ones must have been waited for). The rows and constraints must live
  // until wait() returns.
  void start(std::vector<MaskJob> jobs);
  // Blocks until the started jobs are done; returns at once when nothing is in flight. Any thread.
  void wait();
  // After wait(): the jobs whose constraint threw (index into the started jobs, message). Their rows allow
  // every token, so the step itself goes on; the engine fails those requests.
  const std::vector<std::pair<size_t, std::string>>& failures() const { return failures_; }

 private:
  void run();

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<MaskJob> jobs_;
  size_t next_ = 0;     // the next job to take
  size_t done_ = 0;     // jobs finished
  uint64_t round_ = 0;  // start() calls so far, so that a thread takes part once per round
  bool quit_ = false;
  std::vector<std::pair<size_t, std::string>> failures_;
  std::vector<std::thread> threads_;
};

}  // namespace orchid::engine
