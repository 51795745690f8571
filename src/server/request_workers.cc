#include "server/request_workers.h"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace orchid::server {

int default_request_threads() {
  return std::clamp(int(std::thread::hardware_concurrency()) / 2, 2, 16);
}

size_t default_max_queued_requests(int threads) {
  // A wave of a thousand users (a benchmark, a burst) waits rather than fails; their bodies are read either
  // way.
  return std::max<size_t>(1024, size_t(threads) * 128);
}

RequestWorkers::RequestWorkers(int threads, size_t max_queued) : max_queued_(max_queued) {
  for (int i = 0; i < std::max(1, threads); ++i) threads_.emplace_back([this] { run(); });
}

RequestWorkers::~RequestWorkers() {
  stop();
}

bool RequestWorkers::try_post(std::function<void()> job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ || queue_.size() >= max_queued_) return false;
    queue_.push_back(std::move(job));
  }
  cv_.notify_one();
  return true;
}

size_t RequestWorkers::queued() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.size();
}

void RequestWorkers::stop() {
  std::deque<std::function<void()>> dropped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    dropped.swap(queue_);
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
  threads_.clear();
  // `dropped` goes out of scope here, outside the lock: its jobs may own connections whose destructors lock.
}

void RequestWorkers::run() {
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    try {
      job();
    } catch (const std::exception& e) {
      spdlog::error("http: request worker: {}", e.what());
    } catch (...) {
      spdlog::error("http: request worker: unknown exception");
    }
  }
}

}  // namespace orchid::server
