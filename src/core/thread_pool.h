// A fixed pool of worker threads for data-parallel CPU loops (the CPU backend's GEMMs and attention).
// parallel_for splits [0, n) into contiguous chunks; the caller's thread takes part, so a pool of one
// thread runs everything inline.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace orchid {

class ThreadPool {
 public:
  explicit ThreadPool(int num_threads);  // <= 0: hardware concurrency
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return int(workers_.size()) + 1; }

  // Calls fn(begin, end) on disjoint chunks covering [0, n), at least `grain` items per chunk.
  void parallel_for(size_t n, size_t grain, const std::function<void(size_t, size_t)>& fn);

  static ThreadPool& global();

 private:
  void worker_loop();

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_work_, cv_done_;
  const std::function<void(size_t, size_t)>* job_ = nullptr;
  size_t job_n_ = 0, job_chunk_ = 0, next_chunk_ = 0, num_chunks_ = 0, chunks_done_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
  std::mutex run_mu_;  // one parallel_for at a time
};

}  // namespace orchid
