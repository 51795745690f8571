#include "engine/page_pool.h"

#include "core/error.h"

namespace orchid::engine {

PagePool::PagePool(int32_t num_pages, std::string_view name)
    : name_(name),
      refcount_(size_t(num_pages), 0),
      prev_(size_t(num_pages), -1),
      next_(size_t(num_pages), -1),
      key_(size_t(num_pages)),
      has_key_(size_t(num_pages), 0),
      map_(num_pages) {
  ORCHID_CHECK(num_pages >= 0);
  free_.reserve(size_t(num_pages));
  for (int32_t p = num_pages - 1; p >= 0; --p) free_.push_back(p);  // page 0 is handed out first
}

void PagePool::lru_remove(int32_t p) {
  const int32_t a = prev_[size_t(p)], b = next_[size_t(p)];
  (a >= 0 ? next_[size_t(a)] : head_) = b;
  (b >= 0 ? prev_[size_t(b)] : tail_) = a;
  prev_[size_t(p)] = next_[size_t(p)] = -1;
  --num_idle_;
}

void PagePool::lru_push_back(int32_t p) {
  prev_[size_t(p)] = tail_;
  next_[size_t(p)] = -1;
  (tail_ >= 0 ? next_[size_t(tail_)] : head_) = p;
  tail_ = p;
  ++num_idle_;
}

int32_t PagePool::allocate() {
  int32_t p;
  if (!free_.empty()) {
    p = free_.back();
    free_.pop_back();
  } else {
    ORCHID_CHECK(head_ >= 0, "{} KV pool exhausted", name_);
    p = head_;
    lru_remove(p);
    map_.erase(key_[size_t(p)]);
    has_key_[size_t(p)] = 0;
    ++evictions_;
  }
  refcount_[size_t(p)] = 1;
  return p;
}

void PagePool::ref(int32_t p) {
  ORCHID_CHECK(p >= 0 && p < size());
  if (refcount_[size_t(p)] == 0) {
    ORCHID_CHECK(has_key_[size_t(p)], "{} page {}: ref on a free page", name_, p);
    lru_remove(p);
  }
  ++refcount_[size_t(p)];
}

void PagePool::unref(int32_t p) {
  ORCHID_CHECK(p >= 0 && p < size());
  ORCHID_CHECK(refcount_[size_t(p)] > 0, "{} page {}: double free", name_, p);
  if (--refcount_[size_t(p)] > 0) return;
  if (has_key_[size_t(p)]) {
    lru_push_back(p);
  } else {
    free_.push_back(p);
  }
}

std::optional<int32_t> PagePool::lookup(const PageHash& key) const {
  const int32_t p = map_.find(key);
  if (p < 0) return std::nullopt;
  return p;
}

void PagePool::register_page(int32_t p, const PageHash& key) {
  ORCHID_CHECK(p >= 0 && p < size() && refcount_[size_t(p)] > 0);
  if (has_key_[size_t(p)]) return;
  if (!map_.insert(key, p)) return;  // the same content is cached in another page already
  key_[size_t(p)] = key;
  has_key_[size_t(p)] = 1;
}

void PagePool::check_invariants(std::span<const int32_t> expected) const {
  const int32_t n = size();
  ORCHID_CHECK(int32_t(expected.size()) == n);
  std::vector<uint8_t> where(size_t(n), 0);  // 1: free list, 2: LRU list
  for (int32_t p : free_) {
    ORCHID_CHECK(p >= 0 && p < n && where[size_t(p)] == 0, "{} page {}: twice in the free list", name_, p);
    where[size_t(p)] = 1;
  }
  int32_t idle = 0;
  for (int32_t p = head_, last = -1; p >= 0; last = p, p = next_[size_t(p)]) {
    ORCHID_CHECK(where[size_t(p)] == 0, "{} page {}: in the LRU list twice or also free", name_, p);
    ORCHID_CHECK(prev_[size_t(p)] == last, "{} LRU list links broken at page {}", name_, p);
    where[size_t(p)] = 2;
    ++idle;
    ORCHID_CHECK(idle <= n, "{} LRU list has a cycle", name_);
    if (next_[size_t(p)] < 0) ORCHID_CHECK(tail_ == p);
  }
  ORCHID_CHECK(idle == num_idle_, "{}: {} idle pages counted, {} linked", name_, num_idle_, idle);
  int32_t keyed = 0;
  for (int32_t p = 0; p < n; ++p) {
    ORCHID_CHECK(refcount_[size_t(p)] == expected[size_t(p)], "{} page {}: refcount {} but {} holders", name_,
                 p, refcount_[size_t(p)], expected[size_t(p)]);
    const bool in_use = refcount_[size_t(p)] > 0;
    ORCHID_CHECK(in_use == (where[size_t(p)] == 0), "{} page {}: leaked or in use while free", name_, p);
    if (where[size_t(p)] == 1)
      ORCHID_CHECK(!has_key_[size_t(p)], "{} page {}: cached page on the free list", name_, p);
    if (where[size_t(p)] == 2)
      ORCHID_CHECK(has_key_[size_t(p)], "{} page {}: uncached page in the LRU", name_, p);
    if (has_key_[size_t(p)]) {
      ++keyed;
      ORCHID_CHECK(map_.find(key_[size_t(p)]) == p, "{} page {}: key not mapped back", name_, p);
    }
  }
  ORCHID_CHECK(keyed == map_.size(), "{}: cache map has stale entries", name_);
}

}  // namespace orchid::engine
