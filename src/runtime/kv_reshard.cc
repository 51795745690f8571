#include "runtime/kv_reshard.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace orchid::runtime {

std::vector<uint8_t> reshard_kv(std::span<const uint8_t> bytes, int from, int to, int num_heads,
                                int64_t pages, int rows, std::span<const size_t> head_bytes) {
  if (from < 1 || to < 1 || num_heads % from != 0 || num_heads % to != 0)
    fail("K/V of {} KV heads over {} ranks cannot go to {} ranks", num_heads, from, to);
  size_t per_head = 0;  // one head's bytes over every layer, K and V, page and row
  for (size_t hb : head_bytes) per_head += 2 * size_t(pages) * size_t(rows) * hb;
  if (bytes.size() != per_head * size_t(num_heads))
    fail("K/V handed over: {} bytes, {} expected for {} heads", bytes.size(), per_head * size_t(num_heads),
         num_heads);
  if (from == to) return {bytes.begin(), bytes.end()};
  // Where rank r's part starts (each holds heads(r) heads: parts are equal-sized).
  auto part = [&](int ranks) { return per_head * size_t(num_heads / ranks); };
  std::vector<uint8_t> out(bytes.size());
  const int hf = num_heads / from, ht = num_heads / to;
  for (int t = 0; t < to; ++t) {
    size_t at_t = part(to) * size_t(t);               // cursor in the receiver rank's part
    std::vector<size_t> layer_base(size_t(from), 0);  // cursor of each sender part at the current layer
    for (int r = 0; r < from; ++r) layer_base[size_t(r)] = part(from) * size_t(r);
    for (size_t hb : head_bytes) {
      for (int kv = 0; kv < 2; ++kv)
        for (int64_t p = 0; p < pages; ++p)
          for (int row = 0; row < rows; ++row) {
            const size_t unit = (size_t(kv) * size_t(pages) + size_t(p)) * size_t(rows) + size_t(row);
            for (int h = t * ht; h < (t + 1) * ht; ++h) {
              const int r = h / hf;
              const uint8_t* src =
                  bytes.data() + layer_base[size_t(r)] + (unit * size_t(hf) + size_t(h - r * hf)) * hb;
              std::memcpy(out.data() + at_t, src, hb);
              at_t += hb;
            }
          }
      for (int r = 0; r < from; ++r)
        layer_base[size_t(r)] += 2 * size_t(pages) * size_t(rows) * size_t(hf) * hb;
    }
  }
  return out;
}

std::vector<HeadRun> head_runs(int from, int to, int num_heads, int receiver, uint64_t page_bytes) {
  if (from < 1 || to < 1 || num_heads % from != 0 || num_heads % to != 0)
    fail("K/V of {} KV heads over {} ranks cannot go to {} ranks", num_heads, from, to);
  ORCHID_CHECK(receiver >= 0 && receiver < to, "receiver rank {} of {}", receiver, to);
  const int hf = num_heads / from, ht = num_heads / to;
  if (page_bytes % uint64_t(ht) != 0) fail("a page of {} bytes is not {} heads' blocks", page_bytes, ht);
  const uint64_t block = page_bytes / uint64_t(ht);
  std::vector<HeadRun> runs;
  const int lo = receiver * ht, hi = lo + ht;  // the receiver's heads
  for (int s = lo / hf; s * hf < hi; ++s) {
    const int a = std::max(lo, s * hf), b = std::min(hi, (s + 1) * hf);
    runs.push_back({s, uint64_t(a - s * hf) * block, uint64_t(a - lo) * block, uint64_t(b - a) * block});
  }
  return runs;
}

}  // namespace orchid::runtime
