#include "tokenizer/rank_map.h"

#include <cstring>

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace orchid::tokenizer {

uint64_t RankMap::hash(const char* key, size_t len) {
  return XXH3_64bits(key, len);
}

int32_t RankMap::build(const char* bytes, const uint32_t* offsets, int32_t count) {
  bytes_ = bytes;
  offsets_ = offsets;
  size_t capacity = 16;
  while (capacity < static_cast<size_t>(count) * 2) capacity *= 2;  // load factor <= 0.5
  slots_.assign(capacity, Slot{0, -1});
  mask_ = capacity - 1;
  for (int32_t r = 0; r < count; ++r) {
    const char* key = bytes + offsets[r];
    const size_t len = offsets[r + 1] - offsets[r];
    if (find(key, len) >= 0) return r;
    const uint64_t h = hash(key, len);
    for (uint64_t i = h & mask_;; i = (i + 1) & mask_) {
      if (slots_[i].rank < 0) {
        slots_[i] = Slot{static_cast<uint32_t>(h >> 32), r};
        break;
      }
    }
  }
  return -1;
}

int32_t RankMap::find(const char* key, size_t len) const {
  if (slots_.empty()) return -1;
  const uint64_t h = hash(key, len);
  const uint32_t tag = static_cast<uint32_t>(h >> 32);
  for (uint64_t i = h & mask_;; i = (i + 1) & mask_) {
    const Slot s = slots_[i];
    if (s.rank < 0) return -1;
    if (s.tag == tag) {
      const uint32_t b = offsets_[s.rank], e = offsets_[s.rank + 1];
      if (e - b == len && std::memcmp(bytes_ + b, key, len) == 0) return s.rank;
    }
  }
}

}  // namespace orchid::tokenizer
