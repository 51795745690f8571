#include "core/thread_pool.h"

#include <algorithm>
#include <cstdlib>
#include <string>

namespace orchid {

ThreadPool::ThreadPool(int num_threads) {
  if (num_threads <= 0) num_threads = int(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 1; i < num_threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_work_.notify_all();
  for (auto& t : workers_) t.join();
}

ThreadPool& ThreadPool::global() {
  static ThreadPool pool([] {
    const char* env = std::getenv("ORCHID_NUM_THREADS");
    return env ? std::atoi(env) : 0;
  }());
  return pool;
}

void ThreadPool::worker_loop() {
  uint64_t seen = 0;
  for (;;) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_work_.wait(lock, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    while (next_chunk_ < num_chunks_) {
      size_t c = next_chunk_++;
      const auto* job = job_;
      size_t b = c * job_chunk_, e = std::min(job_n_, b + job_chunk_);
      lock.unlock();
      (*job)(b, e);
      lock.lock();
      if (++chunks_done_ == num_chunks_) cv_done_.notify_all();
    }
  }
}

void ThreadPool::parallel_for(size_t n, size_t grain, const std::function<void(size_t, size_t)>& fn) {
  if (n == 0) return;
  grain = std::max<size_t>(grain, 1);
  size_t max_chunks = (n + grain - 1) / grain;
  size_t chunks = std::min<size_t>(max_chunks, size_t(size()) * 4);
  if (chunks <= 1 || workers_.empty()) {
    fn(0, n);
    return;
  }
  std::lock_guard<std::mutex> run(run_mu_);
  std::unique_lock<std::mutex> lock(mu_);
  job_ = &fn;
  job_n_ = n;
  job_chunk_ = (n + chunks - 1) / chunks;
  num_chunks_ = (n + job_chunk_ - 1) / job_chunk_;
  next_chunk_ = 0;
  chunks_done_ = 0;
  ++generation_;
  cv_work_.notify_all();
  while (next_chunk_ < num_chunks_) {
    size_t c = next_chunk_++;
    size_t b = c * job_chunk_, e = std::min(n, b + job_chunk_);
    lock.unlock();
    fn(b, e);
    lock.lock();
    ++chunks_done_;
  }
  cv_done_.wait(lock, [&] { return chunks_done_ == num_chunks_; });
  job_ = nullptr;
}

}  // namespace orchid
