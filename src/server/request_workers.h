// The threads that turn a received request into a response: JSON parsing, Harmony rendering and
// tokenization of a large prompt take seconds, and on the I/O threads they would stall /health, /metrics
// and every open stream for that long. The queue is bounded so that a flood of big prompts is refused
// (503) instead of piling up.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace orchid::server {

// Half the cores (the other half run the engine and the I/O), at least 2, at most 16.
int default_request_threads();
// Enough to absorb a burst of arrivals at full batch without refusing any.
size_t default_max_queued_requests(int threads);

class RequestWorkers {
 public:
  RequestWorkers(int threads, size_t max_queued);
  ~RequestWorkers();
  RequestWorkers(const RequestWorkers&) = delete;
  RequestWorkers& operator=(const RequestWorkers&) = delete;

  // Queues `job`; false when `max_queued` jobs are already waiting or the workers are stopping. A job that
  // throws is logged and dropped: it must deliver its own result (and errors) to whoever waits for it.
  bool try_post(std::function<void()> job);
  // Jobs waiting for a thread (not counting those running).
  size_t queued() const;
  // Drops the jobs not yet started, waits for the running ones and joins the threads.
  void stop();

 private:
  void run();

  const size_t max_queued_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace orchid::server
