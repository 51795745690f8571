#include "tokenizer/byte_pair_merge.h"

#include <algorithm>
#include <functional>
#include <limits>

namespace orchid::tokenizer {
namespace {

constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();
// Up to this length a linear scan for the lowest pair beats a heap (and needs no allocation); longer pieces
// (long CJK runs, repeated characters) would make it quadratic.
constexpr size_t kSmallPiece = 128;

uint32_t rank_of(const RankMap& ranks, const char* b, size_t len) {
  int32_t r = ranks.find(b, len);
  return r < 0 ? kNone : static_cast<uint32_t>(r);
}

void merge_small(std::string_view piece, const RankMap& ranks, const int32_t* byte_ranks,
                 std::vector<int32_t>* out) {
  const char* b = piece.data();
  const size_t n = piece.size();
  uint32_t start[kSmallPiece + 1];  // start[m] == n closes the last part
  uint32_t pair[kSmallPiece];       // rank of part i joined with part i+1
  int32_t token[kSmallPiece];
  size_t m = n;
  for (size_t i = 0; i < n; ++i) {
    start[i] = static_cast<uint32_t>(i);
    token[i] = byte_ranks[static_cast<unsigned char>(b[i])];
  }
  start[n] = static_cast<uint32_t>(n);
  for (size_t i = 0; i + 1 < n; ++i) pair[i] = rank_of(ranks, b + i, 2);
  while (m > 1) {
    size_t best = 0;
    uint32_t best_rank = pair[0];
    for (size_t i = 1; i + 1 < m; ++i) {
      if (pair[i] < best_rank) best_rank = pair[i], best = i;
    }
    if (best_rank == kNone) break;
    token[best] = static_cast<int32_t>(best_rank);
    // Drop part best+1.
    std::copy(start + best + 2, start + m + 1, start + best + 1);
    std::copy(token + best + 2, token + m, token + best + 1);
    if (best + 2 < m) std::copy(pair + best + 2, pair + m - 1, pair + best + 1);
    --m;
    if (best + 1 < m) pair[best] = rank_of(ranks, b + start[best], start[best + 2] - start[best]);
    if (best > 0) pair[best - 1] = rank_of(ranks, b + start[best - 1], start[best + 1] - start[best - 1]);
  }
  out->insert(out->end(), token, token + m);
}

// Parts are named by their first byte and linked in both directions; a min-heap of (rank, first byte) gives
// the lowest, leftmost pair. Entries go stale when a neighbour merges and are skipped by re-checking the
// rank.
void merge_large(std::string_view piece, const RankMap& ranks, const int32_t* byte_ranks,
                 std::vector<int32_t>* out) {
  const char* b = piece.data();
  const uint32_t n = static_cast<uint32_t>(piece.size());
  std::vector<uint32_t> next(n), prev(n), pair(n);
  std::vector<int32_t> token(n);
  std::vector<uint64_t> heap;
  heap.reserve(n);
  for (uint32_t i = 0; i < n; ++i) {
    next[i] = i + 1;
    prev[i] = i - 1;  // wraps for i == 0; never read there
    token[i] = byte_ranks[static_cast<unsigned char>(b[i])];
    pair[i] = i + 1 < n ? rank_of(ranks, b + i, 2) : kNone;
    if (pair[i] != kNone) heap.push_back((uint64_t{pair[i]} << 32) | i);
  }
  auto later = std::greater<uint64_t>();
  std::make_heap(heap.begin(), heap.end(), later);
  auto push = [&](uint32_t i) {
    if (pair[i] == kNone) return;
    heap.push_back((uint64_t{pair[i]} << 32) | i);
    std::push_heap(heap.begin(), heap.end(), later);
  };
  auto end_of = [&](uint32_t i) { return next[i]; };  // first byte after part i
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    const uint64_t top = heap.back();
    heap.pop_back();
    const uint32_t i = static_cast<uint32_t>(top), r = static_cast<uint32_t>(top >> 32);
    if (pair[i] != r) continue;
    const uint32_t j = next[i];
    token[i] = static_cast<int32_t>(r);
    pair[j] = kNone;  // part j is gone; its heap entries die with it
    next[i] = next[j];
    if (next[i] < n) prev[next[i]] = i;
    pair[i] = next[i] < n ? rank_of(ranks, b + i, end_of(next[i]) - i) : kNone;
    push(i);
    if (i > 0) {
      const uint32_t p = prev[i];
      pair[p] = rank_of(ranks, b + p, end_of(i) - p);
      push(p);
    }
  }
  for (uint32_t i = 0; i < n; i = next[i]) out->push_back(token[i]);
}

}  // namespace

void byte_pair_merge(std::string_view piece, const RankMap& ranks, const int32_t* byte_ranks,
                     std::vector<int32_t>* out) {
  if (piece.size() <= kSmallPiece) {
    merge_small(piece, ranks, byte_ranks, out);
  } else {
    merge_large(piece, ranks, byte_ranks, out);
  }
}

}  // namespace orchid::tokenizer
