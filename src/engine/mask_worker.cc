#include "engine/mask_worker.h"

#include <algorithm>

namespace orchid::engine {

MaskWorker::MaskWorker() : thread_([this] { run(); }) {}

MaskWorker::~MaskWorker() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    quit_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void MaskWorker::start(std::vector<MaskJob> jobs) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    jobs_ = std::move(jobs);
    failures_.clear();
    busy_ = true;
  }
  cv_.notify_all();
}

void MaskWorker::wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return !busy_; });
}

void MaskWorker::run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return quit_ || busy_; });
    if (quit_) return;
    std::vector<MaskJob> jobs = std::move(jobs_);
    lock.unlock();
    std::vector<std::pair<size_t, std::string>> failures;
    for (size_t i = 0; i < jobs.size(); ++i) {
      try {
        jobs[i].constraint->fill_mask(jobs[i].row, jobs[i].remaining);
      } catch (const std::exception& e) {
        std::fill(jobs[i].row.begin(), jobs[i].row.end(), ~0u);
        failures.emplace_back(i, e.what());
      }
    }
    lock.lock();
    busy_ = false;
    failures_ = std::move(failures);
    cv_.notify_all();
  }
}

}  // namespace orchid::engine
