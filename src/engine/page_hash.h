// Content keys of KV pages for prefix reuse. The key of logical page k chains the key of page k-1 with the
// page's token ids, so equal keys mean equal token prefixes up to the end of the page. 128 bits (XXH3) make
// a false hit, which would silently reuse another prompt's K/V, negligible (~n^2 / 2^129 for n pages).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

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

}  // namespace orchid::engine
