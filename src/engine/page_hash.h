// Content keys of KV pages for prefix reuse. The key of logical page k chains the key of page k-1 with the
// page's token ids, so equal keys mean equal token prefixes up to the end of the page. 128 bits (XXH3) make
// a false hit, which would silently reuse another prompt's K/V, negligible (~n^2 / 2^129 for n pages).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace orchid::engine {

struct PageHash {
  uint64_t lo = 0, hi = 0;
  bool operator==(const PageHash&) const = default;
};

struct PageHashHasher {
  size_t operator()(const PageHash& h) const { return size_t(h.lo); }
};

// Key of a full page of `tokens`, following the page whose key is `parent` (a default PageHash for page 0).
PageHash chain_page_hash(const PageHash& parent, std::span<const int32_t> tokens);

// Content key -> page id, for at most `max_entries` keys: open addressing with linear probing and
// backward-shift deletion in one flat array, so a lookup or an update costs about one cache miss and no
// allocation (a node-based map made page registration the largest cost of a decode step).
class PageHashMap {
 public:
  explicit PageHashMap(int32_t max_entries);

  // Page id for `key`, or -1.
  int32_t find(const PageHash& key) const;
  // False (and no change) if `key` is present already.
  bool insert(const PageHash& key, int32_t page);
  // Removes `key`, which must be present.
  void erase(const PageHash& key);
  int32_t size() const { return size_; }

 private:
  struct Slot {
    PageHash key;
    int32_t page = -1;  // -1: empty
  };
  size_t home(const PageHash& key) const { return size_t(key.lo) & mask_; }

  std::vector<Slot> slots_;
  size_t mask_ = 0;
  int32_t size_ = 0, max_entries_ = 0;
};

}  // namespace orchid::engine
