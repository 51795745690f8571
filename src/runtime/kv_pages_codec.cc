#include "runtime/kv_pages_codec.h"

#include <cstring>

#include "core/error.h"

namespace orchid::runtime {
namespace {

constexpr uint32_t kMagic = 0x4b56504f;  // "OPVK" little-endian: orchid pages of K/V
// 2: a share section after the page bytes; 3: the sender's rank count after the page counts (1 and 2 are
// still read, as one rank).
constexpr uint32_t kVersion = 3;
constexpr uint64_t kMaxSection = uint64_t(1) << 40;

template <typename T>
void put(std::string& out, const T& v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(T));
}

void put_bytes(std::string& out, const void* data, uint64_t n) {
  put(out, n);
  out.append(static_cast<const char*>(data), size_t(n));
}

struct Reader {
  std::string_view in;
  size_t at = 0;
  template <typename T>
  T get() {
    if (in.size() - at < sizeof(T)) fail("K/V pages: truncated at byte {}", at);
    T v;
    std::memcpy(&v, in.data() + at, sizeof(T));
    at += sizeof(T);
    return v;
  }
  std::string_view bytes() {
    const uint64_t n = get<uint64_t>();
    if (n > kMaxSection || in.size() - at < n)
      fail("K/V pages: a section of {} bytes with {} left", n, in.size() - at);
    const std::string_view v = in.substr(at, size_t(n));
    at += size_t(n);
    return v;
  }
};

}  // namespace

std::string encode_kv_pages(const KvPages& kv) {
  std::string out;
  out.reserve(64 + kv.layout.size() + kv.tokens.size() * 4 + kv.full.size() + kv.sliding.size());
  put(out, kMagic);
  put(out, kVersion);
  put_bytes(out, kv.layout.data(), kv.layout.size());
  put(out, kv.num_tokens);
  put(out, kv.first_sliding_page);
  put(out, kv.num_full_pages);
  put(out, kv.num_sliding_pages);
  put(out, kv.ranks);
  put_bytes(out, kv.tokens.data(), kv.tokens.size() * sizeof(int32_t));
  put_bytes(out, kv.full.data(), kv.full.size());
  put_bytes(out, kv.sliding.data(), kv.sliding.size());
  put(out, uint8_t(kv.share ? 1 : 0));
  if (kv.share) {
    const KvShare& sh = *kv.share;
    put_bytes(out, sh.transport.data(), sh.transport.size());
    put(out, sh.lease);
    put(out, sh.expires_ms);
    put(out, uint32_t(sh.ranks.size()));
    for (const KvShareRank& r : sh.ranks) {
      put_bytes(out, r.region.data(), r.region.size());
      put(out, r.offset);
      put(out, r.full_bytes);
      put(out, r.sliding_bytes);
    }
  }
  return out;
}

KvPages decode_kv_pages(std::string_view bytes) {
  Reader r{bytes};
  if (r.get<uint32_t>() != kMagic) fail("K/V pages: not an orchid K/V body");
  const uint32_t version = r.get<uint32_t>();
  if (version < 1 || version > kVersion)
    fail("K/V pages: version {}, this build reads 1 to {}", version, kVersion);
  KvPages kv;
  kv.layout = std::string(r.bytes());
  kv.num_tokens = r.get<int32_t>();
  kv.first_sliding_page = r.get<int32_t>();
  kv.num_full_pages = r.get<int32_t>();
  kv.num_sliding_pages = r.get<int32_t>();
  kv.ranks = version >= 3 ? r.get<int32_t>() : 1;
  if (kv.ranks < 1 || kv.ranks > 4096) fail("K/V pages: {} ranks", kv.ranks);
  if (kv.num_tokens < 0 || kv.first_sliding_page < 0 || kv.num_full_pages < 0 || kv.num_sliding_pages < 0)
    fail("K/V pages: negative counts");
  const std::string_view tokens = r.bytes();
  if (tokens.size() % sizeof(int32_t) != 0) fail("K/V pages: token section of {} bytes", tokens.size());
  kv.tokens.resize(tokens.size() / sizeof(int32_t));
  std::memcpy(kv.tokens.data(), tokens.data(), tokens.size());
  const std::string_view full = r.bytes(), sliding = r.bytes();
  kv.full.assign(full.begin(), full.end());
  kv.sliding.assign(sliding.begin(), sliding.end());
  if (version >= 2 && r.get<uint8_t>() != 0) {
    auto sh = std::make_shared<KvShare>();
    sh->transport = std::string(r.bytes());
    sh->lease = r.get<uint64_t>();
    sh->expires_ms = r.get<int64_t>();
    const uint32_t ranks = r.get<uint32_t>();
    if (ranks == 0 || ranks > 4096) fail("K/V pages: a share of {} ranks", ranks);
    for (uint32_t i = 0; i < ranks; ++i) {
      KvShareRank k;
      k.region = std::string(r.bytes());
      k.offset = r.get<uint64_t>();
      k.full_bytes = r.get<uint64_t>();
      k.sliding_bytes = r.get<uint64_t>();
      if (k.full_bytes > kMaxSection || k.sliding_bytes > kMaxSection || k.offset > kMaxSection)
        fail("K/V pages: a share rank of {} + {} bytes at {}", k.full_bytes, k.sliding_bytes, k.offset);
      sh->ranks.push_back(std::move(k));
    }
    if (!kv.full.empty() || !kv.sliding.empty()) fail("K/V pages: both page bytes and a share");
    kv.share = std::move(sh);
  }
  if (r.at != bytes.size()) fail("K/V pages: {} bytes after the end", bytes.size() - r.at);
  return kv;
}

}  // namespace orchid::runtime
