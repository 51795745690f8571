#include "engine/step_round.h"

#include "core/error.h"

namespace orchid::engine {

StepRound::StepRound(int engines) : size_(engines) {
  ORCHID_CHECK(engines >= 1, "a step round of {} engines", engines);
}

StepRound::Outcome StepRound::arrive(bool has_work) {
  std::unique_lock<std::mutex> lock(mu_);
  if (closed_) return Outcome::kClosed;
  any_work_ = any_work_ || has_work;
  if (++arrived_ == size_) {
    outcome_ = any_work_ ? Outcome::kRun : Outcome::kIdle;
    arrived_ = 0;
    any_work_ = false;
    ++generation_;
    cv_.notify_all();
    return outcome_;
  }
  cv_.notify_all();  // engines waiting for work: a round is gathering
  const uint64_t round = generation_;
  cv_.wait(lock, [&] { return generation_ != round || closed_; });
  // The round completed before any close: its outcome stands (the next round needs this engine, so
  // outcome_ is still this round's).
  return generation_ != round ? outcome_ : Outcome::kClosed;
}

uint64_t StepRound::work_epoch() const {
  std::lock_guard<std::mutex> lock(mu_);
  return epoch_;
}

void StepRound::notify_work() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++epoch_;
  }
  cv_.notify_all();
}

void StepRound::wait_for_work(uint64_t since) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return epoch_ != since || arrived_ > 0 || closed_; });
}

void StepRound::close(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!closed_) reason_ = reason;
    closed_ = true;
  }
  cv_.notify_all();
}

bool StepRound::closed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return closed_;
}

std::string StepRound::close_reason() const {
  std::lock_guard<std::mutex> lock(mu_);
  return reason_;
}

}  // namespace orchid::engine
