// One pool of KV pages (full-attention or sliding-window): reference counts, a free list, and the prefix
// cache: pages registered under a content key stay readable after their last holder lets go, as idle pages
// in LRU order, until an allocation needs them back.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/page_hash.h"

namespace orchid::engine {

class PagePool {
 public:
  PagePool(int32_t num_pages, std::string_view name);

  int32_t size() const { return int32_t(refcount_.size()); }
  int32_t num_free() const { return int32_t(free_.size()) + num_idle_; }  // allocatable now
  int32_t num_used() const { return size() - num_free(); }                // refcount > 0
  int32_t num_idle_cached() const { return num_idle_; }                   // cached, refcount 0
  int32_t num_cached() const { return map_.size(); }                      // cached, any refcount
  int64_t num_evictions() const { return evictions_; }

  // A page with refcount 1: a never-cached free page if there is one, else the least recently released
  // cached page, whose key is dropped.
  int32_t allocate();
  // One more holder of a cached page (which may be idle) found by lookup().
  void ref(int32_t page);
  // One holder fewer; at zero the page becomes idle (cached) or free (uncached).
  void unref(int32_t page);

  std::optional<int32_t> lookup(const PageHash& key) const;
  // Publishes a page's content key. No-op if the page has a key already or another page holds this key.
  void register_page(int32_t page, const PageHash& key);

  int32_t refcount(int32_t page) const { return refcount_[size_t(page)]; }
  const PageHash* key_of(int32_t page) const {
    return has_key_[size_t(page)] ? &key_[size_t(page)] : nullptr;
  }
  bool is_idle(int32_t page) const { return refcount_[size_t(page)] == 0 && has_key_[size_t(page)]; }

  // Every structural invariant, and refcounts equal to `expected` (one count per holder).
  void check_invariants(std::span<const int32_t> expected) const;

 private:
  void lru_remove(int32_t page);
  void lru_push_back(int32_t page);

  std::string name_;
  std::vector<int32_t> refcount_;
  std::vector<int32_t> free_;         // uncached pages with refcount 0, used as a stack
  std::vector<int32_t> prev_, next_;  // intrusive LRU list of idle cached pages
  int32_t head_ = -1, tail_ = -1, num_idle_ = 0;
  std::vector<PageHash> key_;
  std::vector<uint8_t> has_key_;
  PageHashMap map_;
  int64_t evictions_ = 0;
};

}  // namespace orchid::engine
