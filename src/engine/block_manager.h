// Page accounting for every sequence: full-attention pages grow with the sequence; sliding-window pages are
// released once every position they hold left the window (< first new position - window + 1), so a decoding
// sequence holds at most ceil(window/page)+1 of them. Prefix reuse shares full pages of token ids between
// sequences through both pools' caches (rules in docs/design.md, "Engine").
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/page_hash.h"
#include "engine/page_pool.h"
#include "runtime/backend.h"

namespace orchid::engine {

// One sequence's pages. Logical page k holds positions [k*P, (k+1)*P) in both tables.
struct SeqPages {
  std::vector<int32_t> full;
  std::vector<int32_t> sliding;  // runtime::kNoPage below `sliding_begin`
  int32_t sliding_begin = 0;     // first logical sliding page still held
  std::vector<PageHash> hashes;  // content keys of leading full pages of the tokens (kept across release)
  int32_t num_registered = 0;    // leading logical pages already published to the caches

  bool holds_pages() const { return !full.empty(); }
};

struct PageNeed {
  int32_t full = 0, sliding = 0;
};

class BlockManager {
 public:
  BlockManager(const runtime::KvCacheSpec& spec, bool prefix_caching);

  const runtime::KvCacheSpec& spec() const { return spec_; }
  int32_t page_size() const { return spec_.page_size; }
  bool has_sliding() const { return spec_.sliding_window > 0; }
  bool prefix_caching() const { return prefix_caching_; }
  // First logical page a sequence still needs in the sliding pool when its next position is `pos`.
  int32_t first_window_page(int32_t pos) const;

  // Tokens at the start of `tokens` whose K/V can be taken from the caches (a multiple of the page size,
  // at most `max_tokens`), for a sequence that holds no pages. Computes seq.hashes as far as needed.
  int32_t find_cached_prefix(SeqPages& seq, std::span<const int32_t> tokens, int32_t max_tokens);

  // Pages taken out of the free pools to process positions [start, end). A sequence holding no pages with
  // start > 0 takes its cached prefix (find_cached_prefix) first; idle cached pages it revives count too.
  PageNeed need(const SeqPages& seq, int32_t start, int32_t end) const;
  bool can_allocate(const PageNeed& need) const;
  void allocate(SeqPages& seq, int32_t start, int32_t end);
  // For a sequence holding no pages whose first `start` positions' K/V come from elsewhere (handed over by
  // another instance): fresh full pages for [0, end), sliding pages from the window of `start` on.
  PageNeed need_fresh(int32_t start, int32_t end) const;
  void allocate_fresh(SeqPages& seq, int32_t start, int32_t end);

  // Drops the sliding pages of a running sequence whose positions are all out of the window of `pos`.
  void release_out_of_window(SeqPages& seq, int32_t pos);
  // After a step: pages completed by the first `num_computed` tokens become shareable.
  void commit(SeqPages& seq, std::span<const int32_t> tokens, int32_t num_computed);
  // Drops every page of the sequence (finished, aborted or preempted).
  void release(SeqPages& seq);
  // Drops the pages past the first `num_positions` positions (drafts the step rejected). They were never
  // published, so nothing else refers to them.
  void truncate(SeqPages& seq, int32_t num_positions);

  const PagePool& full_pool() const { return full_; }
  const PagePool& sliding_pool() const { return sliding_; }

  // Refcounts equal the holders among `live`, no page leaked or held twice by a sequence, caches coherent.
  void check_invariants(std::span<const SeqPages* const> live) const;

 private:
  void ensure_hashes(SeqPages& seq, std::span<const int32_t> tokens, int32_t num_pages) const;
  int32_t pages_for(int32_t tokens) const { return (tokens + spec_.page_size - 1) / spec_.page_size; }

  runtime::KvCacheSpec spec_;
  bool prefix_caching_;
  PagePool full_, sliding_;
};

}  // namespace orchid::engine
