#include "engine/metrics.h"

#include <algorithm>

#include "core/error.h"

namespace orchid::engine {

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {
  ORCHID_CHECK(std::is_sorted(bounds_.begin(), bounds_.end()));
}

Histogram Histogram::latency_seconds() {
  std::vector<double> b;
  for (double decade = 1e-4; decade < 100.0; decade *= 10)
    for (double m : {1.0, 2.0, 5.0}) b.push_back(decade * m);
  b.push_back(100.0);
  return Histogram(std::move(b));
}

void Histogram::observe(double v) {
  const size_t i = size_t(std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin());
  ++counts_[i];
  ++count_;
  sum_ += v;
}

void Histogram::merge(const Histogram& o) {
  ORCHID_CHECK(o.bounds_ == bounds_, "merging histograms with different buckets");
  for (size_t i = 0; i < counts_.size(); ++i) counts_[i] += o.counts_[i];
  count_ += o.count_;
  sum_ += o.sum_;
}

double Histogram::quantile(double q) const {
  if (count_ == 0) return 0.0;
  const double target = std::clamp(q, 0.0, 1.0) * double(count_);
  double seen = 0;
  for (size_t i = 0; i < counts_.size(); ++i) {
    if (counts_[i] == 0) continue;
    const double lo = i == 0 ? 0.0 : bounds_[i - 1];
    if (i == bounds_.size()) return lo;  // +inf bucket: its lower bound is the best estimate
    const double hi = bounds_[i];
    if (seen + double(counts_[i]) >= target) return lo + (hi - lo) * (target - seen) / double(counts_[i]);
    seen += double(counts_[i]);
  }
  return bounds_.empty() ? 0.0 : bounds_.back();
}

void RateMeter::add(Clock::time_point t, int64_t n) {
  if (!slots_.empty() && t - slots_.back().first < std::chrono::milliseconds(100)) {
    slots_.back().second += n;
  } else {
    slots_.emplace_back(t, n);
  }
  while (!slots_.empty() && t - slots_.front().first > window_) slots_.pop_front();
}

double RateMeter::rate(Clock::time_point now) const {
  int64_t total = 0;
  for (const auto& [t, n] : slots_)
    if (now - t <= window_) total += n;
  return double(total) / std::chrono::duration<double>(window_).count();
}

}  // namespace orchid::engine
