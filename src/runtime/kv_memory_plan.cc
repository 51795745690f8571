#include "runtime/kv_memory_plan.h"

#include <algorithm>
#include <climits>

#include "core/error.h"

namespace orchid::runtime {

namespace {
int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}
constexpr double kGiB = double(1ull << 30);
}  // namespace

size_t rank_memory_budget(size_t total, size_t free, double utilization, int ranks_on_device) {
  if (utilization <= 0 || utilization > 1)
    fail("--gpu-memory-utilization must be in (0, 1], got {}", utilization);
  if (ranks_on_device < 1) fail("ranks on a device must be positive, got {}", ranks_on_device);
  const double budget = double(total) * utilization;
  if (budget > double(free))
    fail(
        "--gpu-memory-utilization {} asks for {:.1f} GiB of the GPU's {:.1f} GiB, but only {:.1f} GiB are "
        "free (other processes hold the rest): lower it, or stop them",
        utilization, budget / kGiB, double(total) / kGiB, double(std::min(free, total)) / kGiB);
  return size_t(budget / ranks_on_device);
}

KvPoolPlan plan_kv_pools(const KvPoolInput& in) {
  KvPoolPlan p;
  if (in.sliding_units > 0)
    p.sliding_pages = int32_t(in.max_step_seqs * (ceil_div(in.sliding_window, in.page_size) + 2) +
                              ceil_div(in.max_step_tokens, in.page_size));
  const double sliding_bytes =
      double(p.sliding_pages) * double(in.sliding_units) * double(in.page_layer_bytes);
  const double left = double(in.budget) - double(in.allocated) - double(in.reserve) - sliding_bytes;
  int64_t full = 0;
  if (in.full_layers > 0 && left > 0)
    full = int64_t(left / (double(in.full_layers) * double(in.page_layer_bytes)));
  if (in.kv_pages > 0) full = in.kv_pages;
  const int64_t need = ceil_div(std::min<int64_t>(in.max_model_len, 8192), in.page_size);
  if (in.full_layers > 0 && full < need)
    fail(
        "not enough GPU memory for the KV cache: {} pages of {} tokens fit after {:.1f} GiB of weights and "
        "workspace, {} needed (lower --max-num-batched-tokens or --max-num-seqs, or raise "
        "--gpu-memory-utilization)",
        std::max<int64_t>(full, 0), in.page_size, double(in.allocated) / kGiB, need);
  p.full_pages = int32_t(std::min<int64_t>(full, INT32_MAX));
  p.bytes = size_t(p.full_pages) * size_t(in.full_layers) * in.page_layer_bytes +
            size_t(p.sliding_pages) * size_t(in.sliding_units) * in.page_layer_bytes;
  return p;
}

int64_t sequences_that_fit(const KvPoolPlan& plan, int32_t page_size, int64_t tokens) {
  if (page_size <= 0 || tokens <= 0) return 0;
  return int64_t(plan.full_pages) / ceil_div(tokens, page_size);
}

}  // namespace orchid::runtime
