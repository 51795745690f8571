#include "runtime/communicator.h"

#include <condition_variable>
#include <cstring>
#include <mutex>
#include <vector>

#include "core/error.h"

namespace orchid::runtime {

void SoloCommunicator::all_gather(const void* send, size_t bytes, void* recv) {
  if (send != recv && bytes > 0) std::memmove(recv, send, bytes);
}

namespace {

// The shared state of one in-process group: each collective is post (every rank publishes a pointer),
// barrier, read the others, barrier (nobody's buffer changes before everybody has read it).
struct LocalGroup {
  explicit LocalGroup(int n) : size(n), slots(size_t(n), nullptr) {}
  const int size;
  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0;
  uint64_t generation = 0;
  bool aborted = false;
  std::vector<const void*> slots;

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
    std::memcpy(data, scratch_.data(), count * sizeof(float));
  }

  void all_gather(const void* send, size_t bytes, void* recv) override {
    g_->slots[size_t(rank_)] = send;
    g_->barrier();
    for (int r = 0; r < g_->size; ++r)
      std::memcpy(static_cast<char*>(recv) + size_t(r) * bytes, g_->slots[size_t(r)], bytes);
    g_->barrier();
  }

  void broadcast(void* data, size_t bytes, int root) override {
    ORCHID_CHECK(root >= 0 && root < g_->size, "broadcast root {}", root);
    g_->slots[size_t(rank_)] = data;
    g_->barrier();
    if (rank_ != root) std::memcpy(data, g_->slots[size_t(root)], bytes);
    g_->barrier();
  }

 private:
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
