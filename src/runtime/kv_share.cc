#include "runtime/kv_share.h"

#include <unistd.h>

#include <atomic>

#include "core/error.h"

namespace orchid::runtime {

uint64_t KvShare::bytes() const {
  uint64_t n = 0;
  for (const KvShareRank& r : ranks) n += r.full_bytes + r.sliding_bytes;
  return n;
}

int64_t steady_now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

KvShareLeases::KvShareLeases(uint64_t capacity, std::chrono::milliseconds ttl, uint64_t align)
    : capacity_(capacity), align_(align), ttl_(ttl), id_base_(uint64_t(uint32_t(::getpid())) << 32) {
  ORCHID_CHECK(align_ > 0 && (align_ & (align_ - 1)) == 0, "lease alignment {} is not a power of two",
               align_);
  ORCHID_CHECK(ttl_.count() > 0, "lease time must be positive");
}

void KvShareLeases::expire(int64_t now_ms) {
  for (auto it = held_.begin(); it != held_.end();)
    it = it->second.expires_ms <= now_ms ? held_.erase(it) : ++it;
}

std::optional<KvShareLeases::Lease> KvShareLeases::acquire(uint64_t bytes, int64_t now_ms) {
  const uint64_t size = (std::max<uint64_t>(bytes, 1) + align_ - 1) / align_ * align_;
  std::lock_guard<std::mutex> lock(mu_);
  expire(now_ms);
  uint64_t at = 0;  // first fit: the gaps between held ranges in offset order, then the tail
  for (const auto& [offset, h] : held_) {
    if (offset - at >= size) break;
    at = offset + h.size;
  }
  if (at > capacity_ || capacity_ - at < size) return std::nullopt;
  // One counter for the process: the backends of several engines (--dp) never hand out the same id.
  static std::atomic<uint64_t> next{1};
  const Held h{size, id_base_ | (next.fetch_add(1) & 0xffffffffu), now_ms + ttl_.count()};
  held_.emplace(at, h);
  return Lease{h.id, at, h.expires_ms};
}

bool KvShareLeases::release(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = held_.begin(); it != held_.end(); ++it)
    if (it->second.id == id) {
      held_.erase(it);
      return true;
    }
  return false;
}

uint64_t KvShareLeases::bytes_in_use() const {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t n = 0;
  for (const auto& [offset, h] : held_) n += h.size;
  return n;
}

size_t KvShareLeases::leases() const {
  std::lock_guard<std::mutex> lock(mu_);
  return held_.size();
}

}  // namespace orchid::runtime
