#include "tokenizer/unicode_class.h"

#include <iterator>
#include <vector>

namespace orchid::tokenizer {
namespace {

struct ClassRange {
  uint32_t first;
  uint8_t bits;
};

constexpr ClassRange kRanges[] = {
#include "tokenizer/unicode_class_ranges.inc"
};

// A flat byte per code point (1.1 MB) rather than a two-level table: the scanner looks a class up for every
// non-ASCII character, and text touches only a few pages of it.
std::vector<uint8_t> build_table() {
  std::vector<uint8_t> table(kCodePointLimit);
  const size_t n = std::size(kRanges);
  for (size_t i = 0; i < n; ++i) {
    uint32_t end = i + 1 < n ? kRanges[i + 1].first : kCodePointLimit;
    for (uint32_t cp = kRanges[i].first; cp < end; ++cp) table[cp] = kRanges[i].bits;
  }
  return table;
}

}  // namespace

const uint8_t* char_class_table() {
  static const std::vector<uint8_t> table = build_table();
  return table.data();
}

}  // namespace orchid::tokenizer
