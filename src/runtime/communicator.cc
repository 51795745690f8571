#include "runtime/communicator.h"

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <numeric>
#include <vector>

#include "core/error.h"

namespace orchid::runtime {

namespace {
void check_counts(std::span<const size_t> counts, int size, const char* what) {
  ORCHID_CHECK(counts.size() == size_t(size), "{}: {} counts for a group of {}", what, counts.size(), size);
}
}  // namespace

std::vector<size_t> Communicator::all_gather_counts(size_t mine) {
  std::vector<uint64_t> all(static_cast<size_t>(size()));
  const uint64_t v = mine;
  all_gather(&v, sizeof(v), all.data());
  return std::vector<size_t>(all.begin(), all.end());
}

// The defaults, from the fixed-size collectives: each part padded to the longest, and the whole buffer
// all-reduced (rank order) of which each rank keeps its segment. Implementations override them with
// transfers of the real sizes.
void Communicator::all_gather_v(const void* send, std::span<const size_t> bytes, void* recv) {
  check_counts(bytes, size(), "all_gather_v");
  const size_t longest = *std::max_element(bytes.begin(), bytes.end());
  if (longest == 0) return;
  std::vector<char> part(longest, 0), all(longest * bytes.size());
  if (bytes[size_t(rank())] > 0) std::memcpy(part.data(), send, bytes[size_t(rank())]);
  all_gather(part.data(), longest, all.data());
  size_t at = 0;
  for (size_t r = 0; r < bytes.size(); ++r) {
    std::memcpy(static_cast<char*>(recv) + at, all.data() + r * longest, bytes[r]);
    at += bytes[r];
  }
}

void Communicator::reduce_scatter_v(const float* send, std::span<const size_t> counts, float* recv) {
  check_counts(counts, size(), "reduce_scatter_v");
  const size_t total = std::accumulate(counts.begin(), counts.end(), size_t(0));
  const size_t begin = std::accumulate(counts.begin(), counts.begin() + rank(), size_t(0));
  std::vector<float> sum(total);
  if (total > 0) std::copy_n(send, total, sum.data());
  all_reduce_sum(sum.data(), total);
  std::copy_n(sum.data() + begin, counts[size_t(rank())], recv);
}

void SoloCommunicator::all_gather(const void* send, size_t bytes, void* recv) {
  if (send != recv && bytes > 0) std::memmove(recv, send, bytes);
}

void SoloCommunicator::all_gather_v(const void* send, std::span<const size_t> bytes, void* recv) {
  check_counts(bytes, 1, "all_gather_v");
  all_gather(send, bytes[0], recv);
}

void SoloCommunicator::reduce_scatter_v(const float* send, std::span<const size_t> counts, float* recv) {
  check_counts(counts, 1, "reduce_scatter_v");
  if (send != recv && counts[0] > 0) std::memmove(recv, send, counts[0] * sizeof(float));
}

namespace {

// The shared state of one in-process group: each collective is post (every rank publishes a pointer),
// barrier, read the others, barrier (nobody's buffer changes before everybody has read it).
struct LocalGroup {
  explicit LocalGroup(int n) : size(n), slots(size_t(n), nullptr), counts(size_t(n)) {}
  const int size;
  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0;
  uint64_t generation = 0;
  bool aborted = false;
  std::vector<const void*> slots;
  std::vector<std::span<const size_t>> counts;  // the variable collectives' lists, checked equal

  void barrier() {
    std::unique_lock<std::mutex> lock(mu);
    if (aborted) ORCHID_CHECK(false, "a rank of this in-process group failed");
    const uint64_t gen = generation;
    if (++arrived == size) {
      arrived = 0;
      ++generation;
      cv.notify_all();
      return;
    }
    cv.wait(lock, [&] { return generation != gen || aborted; });
    if (aborted) ORCHID_CHECK(false, "a rank of this in-process group failed");
  }
  void abort() {
    std::lock_guard<std::mutex> lock(mu);
    aborted = true;
    cv.notify_all();
  }
};

class LocalRank final : public LocalCommunicator {
 public:
  LocalRank(std::shared_ptr<LocalGroup> g, int rank) : g_(std::move(g)), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return g_->size; }
  void abort() override { g_->abort(); }
  void barrier() override { g_->barrier(); }

  void all_reduce_sum(float* data, size_t count) override {
    if (g_->size == 1) return;
    g_->slots[size_t(rank_)] = data;
    g_->barrier();
    scratch_.assign(count, 0.0f);
    for (int r = 0; r < g_->size; ++r) {
      const float* src = static_cast<const float*>(g_->slots[size_t(r)]);
      for (size_t i = 0; i < count; ++i) scratch_[i] += src[i];
    }
    g_->barrier();  // every rank has read every buffer
    if (count > 0) std::memcpy(data, scratch_.data(), count * sizeof(float));
  }

  void all_gather(const void* send, size_t bytes, void* recv) override {
    g_->slots[size_t(rank_)] = send;
    g_->barrier();
    for (int r = 0; r < g_->size && bytes > 0; ++r)
      std::memcpy(static_cast<char*>(recv) + size_t(r) * bytes, g_->slots[size_t(r)], bytes);
    g_->barrier();
  }

  void all_gather_v(const void* send, std::span<const size_t> bytes, void* recv) override {
    check_counts(bytes, g_->size, "all_gather_v");
    post(send, bytes);
    size_t at = 0;
    for (int r = 0; r < g_->size; ++r) {
      const size_t n = bytes[size_t(r)];
      if (n > 0) std::memcpy(static_cast<char*>(recv) + at, g_->slots[size_t(r)], n);
      at += n;
    }
    g_->barrier();
  }

  void reduce_scatter_v(const float* send, std::span<const size_t> counts, float* recv) override {
    check_counts(counts, g_->size, "reduce_scatter_v");
    post(send, counts);
    const size_t begin = std::accumulate(counts.begin(), counts.begin() + rank_, size_t(0));
    const size_t n = counts[size_t(rank_)];
    scratch_.assign(n, 0.0f);  // as all_reduce_sum: 0 + send_0 + send_1 + ...
    for (int r = 0; r < g_->size && n > 0; ++r) {
      const float* src = static_cast<const float*>(g_->slots[size_t(r)]) + begin;
      for (size_t i = 0; i < n; ++i) scratch_[i] += src[i];
    }
    g_->barrier();  // every rank has read every buffer
    if (n > 0) std::memcpy(recv, scratch_.data(), n * sizeof(float));
  }

  void broadcast(void* data, size_t bytes, int root) override {
    ORCHID_CHECK(root >= 0 && root < g_->size, "broadcast root {}", root);
    g_->slots[size_t(rank_)] = data;
    g_->barrier();
    if (rank_ != root && bytes > 0) std::memcpy(data, g_->slots[size_t(root)], bytes);
    g_->barrier();
  }

 private:
  // Publishes this rank's buffer and count list; after the barrier every rank's are readable, and the lists
  // are checked to be one list (a caller that disagrees is a programming error, not a hang or a bad read).
  void post(const void* data, std::span<const size_t> counts) {
    g_->slots[size_t(rank_)] = data;
    g_->counts[size_t(rank_)] = counts;
    g_->barrier();
    ORCHID_CHECK(std::equal(counts.begin(), counts.end(), g_->counts[0].begin(), g_->counts[0].end()),
                 "rank {} passed other counts than rank 0 to a variable-count collective", rank_);
  }

  std::shared_ptr<LocalGroup> g_;
  int rank_;
  std::vector<float> scratch_;
};

}  // namespace

std::vector<std::unique_ptr<LocalCommunicator>> make_local_group(int size) {
  ORCHID_CHECK(size >= 1, "group size {}", size);
  auto g = std::make_shared<LocalGroup>(size);
  std::vector<std::unique_ptr<LocalCommunicator>> out;
  for (int r = 0; r < size; ++r) out.push_back(std::make_unique<LocalRank>(g, r));
  return out;
}

}  // namespace orchid::runtime
