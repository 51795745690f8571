#include "engine/page_hash.h"

#include <xxhash.h>

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

}  // namespace orchid::engine
