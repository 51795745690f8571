// Byte string -> BPE rank, the hot lookup of encoding. Open addressing over one array of 8-byte slots (a hash
// tag and the rank); keys are not stored but compared against the vocabulary's own bytes, so the map adds
// 4 MB for o200k and one cache miss per probe in the common case.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace orchid::tokenizer {

class RankMap {
 public:
  // bytes[offsets[r] .. offsets[r+1]) are the bytes of rank r; both arrays must outlive the map and stay
  // unchanged. Returns -1, or the first rank whose bytes repeat an earlier rank's (the map is then unusable).
  int32_t build(const char* bytes, const uint32_t* offsets, int32_t count);

  // The rank of `key`, or -1.
  int32_t find(const char* key, size_t len) const;
  int32_t find(std::string_view key) const { return find(key.data(), key.size()); }

 private:
  struct Slot {
    uint32_t tag;
    int32_t rank;  // -1: empty
  };
  static uint64_t hash(const char* key, size_t len);

  std::vector<Slot> slots_;
  uint64_t mask_ = 0;
  const char* bytes_ = nullptr;
  const uint32_t* offsets_ = nullptr;
};

}  // namespace orchid::tokenizer
