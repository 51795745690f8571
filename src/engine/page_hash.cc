#include "engine/page_hash.h"

#include <xxhash.h>

#include "core/error.h"

#include <cstring>
#include <vector>

namespace orchid::engine {

PageHash chain_page_hash(const PageHash& parent, std::span<const int32_t> tokens) {
  thread_local std::vector<unsigned char> buf;
  buf.resize(sizeof(PageHash) + tokens.size_bytes());
  std::memcpy(buf.data(), &parent, sizeof(PageHash));
  std::memcpy(buf.data() + sizeof(PageHash), tokens.data(), tokens.size_bytes());
  const XXH128_hash_t h = XXH3_128bits(buf.data(), buf.size());
  return PageHash{h.low64, h.high64};
}

PageHashMap::PageHashMap(int32_t max_entries) : max_entries_(max_entries) {
  ORCHID_CHECK(max_entries >= 0);
  size_t cap = 16;
  while (cap < size_t(max_entries) * 2) cap *= 2;  // load factor <= 1/2
  slots_.resize(cap);
  mask_ = cap - 1;
}

int32_t PageHashMap::find(const PageHash& key) const {
  for (size_t i = home(key);; i = (i + 1) & mask_) {
    const Slot& s = slots_[i];
    if (s.page < 0) return -1;
    if (s.key == key) return s.page;
  }
}

bool PageHashMap::insert(const PageHash& key, int32_t page) {
  ORCHID_CHECK(page >= 0);
  size_t i = home(key);
  for (; slots_[i].page >= 0; i = (i + 1) & mask_)
    if (slots_[i].key == key) return false;
  ORCHID_CHECK(size_ < max_entries_, "page hash map full");
  slots_[i] = {key, page};
  ++size_;
  return true;
}

void PageHashMap::erase(const PageHash& key) {
  size_t i = home(key);
  while (!(slots_[i].page >= 0 && slots_[i].key == key)) {
    ORCHID_CHECK(slots_[i].page >= 0, "erasing a key that is not there");
    i = (i + 1) & mask_;
  }
  // Backward shift: move later entries of the probe run into the hole when their home allows it.
  for (size_t j = (i + 1) & mask_; slots_[j].page >= 0; j = (j + 1) & mask_) {
    const size_t h = home(slots_[j].key);
    // Entry j may move to i if its home is not in the cyclic range (i, j].
    const bool home_between = i <= j ? (h > i && h <= j) : (h > i || h <= j);
    if (!home_between) {
      slots_[i] = slots_[j];
      i = j;
    }
  }
  slots_[i] = {};
  --size_;
}

}  // namespace orchid::engine
