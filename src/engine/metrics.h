// Engine metrics for the server's /metrics and logs: gauges, counters, a recent token rate, and latency
// histograms (time to first token, inter-token latency) with fixed buckets, Prometheus style.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <utility>
#include <vector>

namespace orchid::engine {

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);  // ascending; an implicit +inf bucket follows
  // Seconds, from 100 us to 100 s in 1-2-5 steps.
  static Histogram latency_seconds();

  void observe(double v);
  // Adds another histogram's observations (same bounds).
  void merge(const Histogram& other);
  const std::vector<double>& upper_bounds() const { return bounds_; }
  const std::vector<uint64_t>& bucket_counts() const { return counts_; }  // not cumulative; +inf last
  uint64_t count() const { return count_; }
  double sum() const { return sum_; }
  // Estimate from the buckets (linear within a bucket); 0 when empty.
  double quantile(double q) const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;
  uint64_t count_ = 0;
  double sum_ = 0;
};

// Events per second over the last `window` (coarse: samples are merged into 100 ms slots).
class RateMeter {
 public:
  using Clock = std::chrono::steady_clock;
  explicit RateMeter(std::chrono::milliseconds window = std::chrono::seconds(10)) : window_(window) {}
  void add(Clock::time_point t, int64_t n);
  double rate(Clock::time_point now) const;

 private:
  std::chrono::milliseconds window_;
  std::deque<std::pair<Clock::time_point, int64_t>> slots_;
};

struct EngineMetrics {
  // Gauges.
  int64_t num_waiting = 0;  // queued, including preempted sequences and requests not yet picked up
  int64_t num_running = 0;
  int32_t kv_full_pages_total = 0, kv_full_pages_used = 0, kv_full_pages_cached = 0;  // cached: idle
  int32_t kv_sliding_pages_total = 0, kv_sliding_pages_used = 0, kv_sliding_pages_cached = 0;
  double generation_tokens_per_s = 0;  // over the last 10 s
  double prompt_tokens_per_s = 0;
  // Counters.
  int64_t steps = 0;
  int64_t requests_submitted = 0, requests_finished = 0, requests_aborted = 0, requests_failed = 0;
  int64_t prompt_tokens = 0;  // prompt tokens computed: prefix-cache hits excluded, recomputation included
  int64_t generation_tokens = 0;
  int64_t preemptions = 0;
  int64_t prefix_query_tokens = 0, prefix_hit_tokens = 0;
  int64_t kv_evictions = 0;
  // Disaggregation: prompt tokens whose K/V were handed over to this engine, and K/V bytes in and out.
  int64_t kv_imported_tokens = 0, kv_import_bytes = 0, kv_export_bytes = 0;
  int64_t kv_shared_exports = 0, kv_shared_imports = 0;  // handed over in place (runtime/kv_share.h)
  int64_t kv_share_leases = 0;                           // export leases held now
  // Where the steps' time went, seconds summed over steps: scheduling (the plan, K/V imports, mask jobs
  // started), the backend's forward() less its wait for the device (host work, device idle on a backend
  // that computes asynchronously), that wait, and taking the outputs (stop checks, events, text).
  double step_schedule_seconds = 0, step_backend_host_seconds = 0, step_device_wait_seconds = 0,
         step_outputs_seconds = 0;
  // Async scheduling: steps launched while the step before them still ran (their planning overlapped it).
  int64_t pipelined_steps = 0;
  // Speculative decoding: sequence-steps that carried drafts, their drafts, and the drafts accepted.
  int64_t spec_drafts = 0, spec_draft_tokens = 0, spec_accepted_tokens = 0;
  // Latencies, seconds.
  Histogram time_to_first_token = Histogram::latency_seconds();
  Histogram queue_time = Histogram::latency_seconds();  // arrival to first admission (vLLM's queue time)
  Histogram inter_token_latency = Histogram::latency_seconds();
  Histogram step_time = Histogram::latency_seconds();

  double spec_acceptance_rate() const {
    return spec_draft_tokens ? double(spec_accepted_tokens) / double(spec_draft_tokens) : 0.0;
  }
  // Tokens a drafted sequence-step yields on average: its accepted drafts and the one drawn after them.
  double spec_mean_accepted_length() const {
    return spec_drafts ? 1.0 + double(spec_accepted_tokens) / double(spec_drafts) : 0.0;
  }
  double prefix_hit_rate() const {
    return prefix_query_tokens ? double(prefix_hit_tokens) / double(prefix_query_tokens) : 0.0;
  }
};

}  // namespace orchid::engine
