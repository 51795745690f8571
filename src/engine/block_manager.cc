#include "engine/block_manager.h"

#include <algorithm>

#include "core/error.h"

namespace orchid::engine {

using runtime::kNoPage;

BlockManager::BlockManager(const runtime::KvCacheSpec& spec, bool prefix_caching)
    : spec_(spec),
      prefix_caching_(prefix_caching),
      full_(spec.num_full_pages, "full"),
      sliding_(spec.sliding_window > 0 ? spec.num_sliding_pages : 0, "sliding") {
  ORCHID_CHECK(spec.page_size > 0 && spec.num_full_pages > 0 && spec.sliding_window >= 0);
  ORCHID_CHECK(spec.sliding_window == 0 || spec.num_sliding_pages > 0);
}

int32_t BlockManager::first_window_page(int32_t pos) const {
  if (!has_sliding()) return 0;
  const int32_t first_pos = pos - spec_.sliding_window + 1;
  return first_pos > 0 ? first_pos / spec_.page_size : 0;
}

void BlockManager::ensure_hashes(SeqPages& seq, std::span<const int32_t> tokens, int32_t num_pages) const {
  const size_t p = size_t(spec_.page_size);
  ORCHID_CHECK(size_t(num_pages) * p <= tokens.size());
  while (int32_t(seq.hashes.size()) < num_pages) {
    const size_t k = seq.hashes.size();
    seq.hashes.push_back(chain_page_hash(k ? seq.hashes[k - 1] : PageHash{}, tokens.subspan(k * p, p)));
  }
}

int32_t BlockManager::find_cached_prefix(SeqPages& seq, std::span<const int32_t> tokens, int32_t max_tokens) {
  ORCHID_CHECK(!seq.holds_pages());
  const int32_t p = spec_.page_size;
  if (!prefix_caching_) return 0;
  const int32_t max_pages = std::min<int64_t>(max_tokens, int64_t(tokens.size())) / p;
  if (max_pages <= 0) return 0;
  ensure_hashes(seq, tokens, max_pages);
  int32_t k = 0;
  while (k < max_pages && full_.lookup(seq.hashes[size_t(k)])) ++k;
  if (!has_sliding()) return k * p;
  // Sliding layers resume at position k*P only if the pages holding its window are still cached. A page j
  // missing rules out every k with first_window_page(k*P) <= j < k, so the search continues at k = j.
  while (k > 0) {
    int32_t missing = -1;
    for (int32_t j = k - 1; j >= first_window_page(k * p); --j) {
      if (!sliding_.lookup(seq.hashes[size_t(j)])) {
        missing = j;
        break;
      }
    }
    if (missing < 0) return k * p;
    k = missing;
  }
  return 0;
}

PageNeed BlockManager::need(const SeqPages& seq, int32_t start, int32_t end) const {
  ORCHID_CHECK(start >= 0 && end > start);
  PageNeed n;
  const int32_t end_pages = pages_for(end);
  if (!seq.holds_pages() && start > 0) {
    const int32_t k = start / spec_.page_size;
    ORCHID_CHECK(k * spec_.page_size == start && int32_t(seq.hashes.size()) >= k);
    for (int32_t j = 0; j < k; ++j) {
      auto page = full_.lookup(seq.hashes[size_t(j)]);
      ORCHID_CHECK(page.has_value(), "cached prefix page {} vanished", j);
      n.full += full_.refcount(*page) == 0;  // an idle page leaves the free pool when revived
    }
    n.full += end_pages - k;
    if (has_sliding()) {
      for (int32_t j = first_window_page(start); j < k; ++j) {
        auto page = sliding_.lookup(seq.hashes[size_t(j)]);
        ORCHID_CHECK(page.has_value(), "cached sliding page {} vanished", j);
        n.sliding += sliding_.refcount(*page) == 0;
      }
      n.sliding += end_pages - k;
    }
    return n;
  }
  ORCHID_CHECK(seq.holds_pages() || start == 0);
  n.full = std::max(0, end_pages - int32_t(seq.full.size()));
  if (has_sliding()) {
    n.sliding = std::max(0, end_pages - std::max(int32_t(seq.sliding.size()), first_window_page(start)));
  }
  return n;
}

bool BlockManager::can_allocate(const PageNeed& need) const {
  return need.full <= full_.num_free() && need.sliding <= sliding_.num_free();
}

void BlockManager::allocate(SeqPages& seq, int32_t start, int32_t end) {
  const int32_t end_pages = pages_for(end);
  const int32_t lo = first_window_page(start);
  if (!seq.holds_pages() && start > 0) {
    const int32_t k = start / spec_.page_size;
    // References first, so that the allocations below cannot evict the prefix being taken.
    for (int32_t j = 0; j < k; ++j) {
      const int32_t page = *full_.lookup(seq.hashes[size_t(j)]);
      full_.ref(page);
      seq.full.push_back(page);
    }
    if (has_sliding()) {
      seq.sliding.assign(size_t(lo), kNoPage);
      for (int32_t j = lo; j < k; ++j) {
        const int32_t page = *sliding_.lookup(seq.hashes[size_t(j)]);
        sliding_.ref(page);
        seq.sliding.push_back(page);
      }
      seq.sliding_begin = lo;
    }
    seq.num_registered = k;
  }
  while (int32_t(seq.full.size()) < end_pages) seq.full.push_back(full_.allocate());
  if (has_sliding()) {
    if (int32_t(seq.sliding.size()) < lo) {
      seq.sliding.resize(size_t(lo), kNoPage);
      seq.sliding_begin = std::max(seq.sliding_begin, lo);
    }
    while (int32_t(seq.sliding.size()) < end_pages) seq.sliding.push_back(sliding_.allocate());
  }
}

PageNeed BlockManager::need_fresh(int32_t start, int32_t end) const {
  ORCHID_CHECK(start >= 0 && end > start);
  PageNeed n;
  n.full = pages_for(end);
  if (has_sliding()) n.sliding = pages_for(end) - first_window_page(start);
  return n;
}

void BlockManager::allocate_fresh(SeqPages& seq, int32_t start, int32_t end) {
  ORCHID_CHECK(!seq.holds_pages(), "fresh pages for a sequence that holds some");
  const int32_t end_pages = pages_for(end);
  while (int32_t(seq.full.size()) < end_pages) seq.full.push_back(full_.allocate());
  if (has_sliding()) {
    const int32_t lo = first_window_page(start);
    seq.sliding.assign(size_t(lo), kNoPage);
    seq.sliding_begin = lo;
    while (int32_t(seq.sliding.size()) < end_pages) seq.sliding.push_back(sliding_.allocate());
  }
  seq.num_registered = 0;
}

void BlockManager::release_out_of_window(SeqPages& seq, int32_t pos) {
  if (!has_sliding()) return;
  const int32_t lo = std::min(first_window_page(pos), int32_t(seq.sliding.size()));
  for (int32_t k = seq.sliding_begin; k < lo; ++k) {
    if (seq.sliding[size_t(k)] != kNoPage) sliding_.unref(seq.sliding[size_t(k)]);
    seq.sliding[size_t(k)] = kNoPage;
  }
  seq.sliding_begin = std::max(seq.sliding_begin, lo);
}

void BlockManager::commit(SeqPages& seq, std::span<const int32_t> tokens, int32_t num_computed) {
  if (!prefix_caching_) return;
  const int32_t done = num_computed / spec_.page_size;
  if (done <= seq.num_registered) return;
  ORCHID_CHECK(done <= int32_t(seq.full.size()));
  ensure_hashes(seq, tokens, done);
  for (int32_t k = seq.num_registered; k < done; ++k) {
    full_.register_page(seq.full[size_t(k)], seq.hashes[size_t(k)]);
    if (has_sliding() && k >= seq.sliding_begin && seq.sliding[size_t(k)] != kNoPage) {
      sliding_.register_page(seq.sliding[size_t(k)], seq.hashes[size_t(k)]);
    }
  }
  seq.num_registered = done;
}

void BlockManager::release(SeqPages& seq) {
  // Last pages first: they reach the LRU list first and are evicted before the shared early ones.
  for (auto it = seq.full.rbegin(); it != seq.full.rend(); ++it) full_.unref(*it);
  for (auto it = seq.sliding.rbegin(); it != seq.sliding.rend(); ++it)
    if (*it != kNoPage) sliding_.unref(*it);
  seq.full.clear();
  seq.sliding.clear();
  seq.sliding_begin = 0;
  seq.num_registered = 0;
}

void BlockManager::truncate(SeqPages& seq, int32_t num_positions) {
  const size_t keep = size_t(pages_for(num_positions));
  ORCHID_CHECK(keep >= size_t(seq.num_registered), "truncating published pages");
  while (seq.full.size() > keep) {
    full_.unref(seq.full.back());
    seq.full.pop_back();
  }
  while (seq.sliding.size() > keep) {
    if (seq.sliding.back() != kNoPage) sliding_.unref(seq.sliding.back());
    seq.sliding.pop_back();
  }
}

void BlockManager::check_invariants(std::span<const SeqPages* const> live) const {
  std::vector<int32_t> full_refs(size_t(full_.size()), 0), sliding_refs(size_t(sliding_.size()), 0);
  for (const SeqPages* seq : live) {
    for (int32_t page : seq->full) {
      ORCHID_CHECK(page >= 0 && page < full_.size(), "full page {} out of range", page);
      ++full_refs[size_t(page)];
    }
    ORCHID_CHECK(seq->num_registered <= int32_t(seq->full.size()));
    if (has_sliding()) {
      ORCHID_CHECK(seq->sliding.size() == seq->full.size(), "sliding table {} pages, full table {}",
                   seq->sliding.size(), seq->full.size());
      for (int32_t k = 0; k < int32_t(seq->sliding.size()); ++k) {
        const int32_t page = seq->sliding[size_t(k)];
        if (k < seq->sliding_begin) {
          ORCHID_CHECK(page == kNoPage, "sliding page {} kept below the window", k);
          continue;
        }
        ORCHID_CHECK(page >= 0 && page < sliding_.size(), "sliding page {} out of range", page);
        ++sliding_refs[size_t(page)];
      }
    } else {
      ORCHID_CHECK(seq->sliding.empty());
    }
  }
  for (const SeqPages* seq : live) {
    // Pages past the published prefix are being written: they must be private and uncached.
    for (size_t k = 0; k < seq->full.size(); ++k) {
      const int32_t page = seq->full[k];
      if (int32_t(k) >= seq->num_registered) {
        ORCHID_CHECK(full_refs[size_t(page)] == 1 && !full_.key_of(page), "full page {} written while shared",
                     page);
      } else if (const PageHash* key = full_.key_of(page)) {
        ORCHID_CHECK(*key == seq->hashes[k], "full page {} cached under another prefix", page);
      }
      if (!has_sliding() || int32_t(k) < seq->sliding_begin) continue;
      const int32_t sp = seq->sliding[k];
      if (int32_t(k) >= seq->num_registered) {
        ORCHID_CHECK(sliding_refs[size_t(sp)] == 1 && !sliding_.key_of(sp),
                     "sliding page {} written while shared", sp);
      } else if (const PageHash* key = sliding_.key_of(sp)) {
        ORCHID_CHECK(*key == seq->hashes[k], "sliding page {} cached under another prefix", sp);
      }
    }
  }
  full_.check_invariants(full_refs);
  sliding_.check_invariants(sliding_refs);
}

}  // namespace orchid::engine
