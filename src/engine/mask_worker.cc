#include "engine/mask_worker.h"

#include <algorithm>

namespace orchid::engine {

MaskWorker::MaskWorker(int32_t threads) {
  if (threads <= 0) threads = int32_t(std::clamp(std::thread::hardware_concurrency(), 1u, 8u));
  for (int32_t i = 0; i < threads; ++i) threads_.emplace_back([this] { run(); });
}

MaskWorker::~MaskWorker() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    quit_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void MaskWorker::start(std::vector<MaskJob> jobs) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    jobs_ = std::move(jobs);
    next_ = done_ = 0;
    failures_.clear();
    ++round_;
  }
  cv_.notify_all();
}

void MaskWorker::wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return done_ == jobs_.size(); });
}

void MaskWorker::run() {
  uint64_t seen = 0;
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return quit_ || (round_ != seen && next_ < jobs_.size()); });
    if (quit_) return;
    seen = round_;
    while (next_ < jobs_.size()) {
      const size_t i = next_++;
      const MaskJob job = jobs_[i];
      lock.unlock();
      std::string error;
      try {
        job.constraint->fill_mask(job.row, job.remaining);
      } catch (const std::exception& e) {
        std::fill(job.row.begin(), job.row.end(), ~0u);
        error = e.what();
      }
      lock.lock();
      if (!error.empty()) failures_.emplace_back(i, std::move(error));
      if (++done_ == jobs_.size()) cv_.notify_all();
    }
  }
}

}  // namespace orchid::engine
