// K/V handed over in place (runtime/kv_share.h): the export buffer's leases (first fit, release, expiry,
// ids), the shared-memory objects the CPU backend exports through, and a share's round trip through the
// K/V codec (and the codec's refusal of garbled shares).
#include "runtime/kv_share.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <random>
#include <set>

#include "core/error.h"
#include "runtime/kv_pages_codec.h"
#include "runtime/shared_memory.h"

namespace orchid::runtime {
namespace {

using std::chrono::milliseconds;

TEST(KvShareLeases, FirstFitReleaseAndExpiry) {
  KvShareLeases l(4096, milliseconds(1000), 256);
  const auto a = l.acquire(1000, 0);  // 1024 bytes
  const auto b = l.acquire(256, 0);
  const auto c = l.acquire(2000, 0);  // 2048
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(a->offset, 0u);
  EXPECT_EQ(b->offset, 1024u);
  EXPECT_EQ(c->offset, 1280u);
  EXPECT_EQ(l.bytes_in_use(), 1024u + 256 + 2048);
  EXPECT_FALSE(l.acquire(1024, 0));  // 768 left
  EXPECT_TRUE(l.release(a->id));
  EXPECT_FALSE(l.release(a->id));     // twice
  const auto d = l.acquire(512, 10);  // the first gap
  ASSERT_TRUE(d);
  EXPECT_EQ(d->offset, 0u);
  EXPECT_EQ(d->expires_ms, 1010);
  // b and c expire at 1000, d at 1010: at 1005 only d holds its range.
  const auto e = l.acquire(3000, 1005);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->offset, 512u);
  EXPECT_EQ(l.leases(), 2u);
  EXPECT_FALSE(l.release(b->id));  // expired
  EXPECT_TRUE(l.release(d->id));
  EXPECT_TRUE(l.release(e->id));
  EXPECT_EQ(l.bytes_in_use(), 0u);
}

TEST(KvShareLeases, IdsAreUniqueAndCarryTheProcess) {
  KvShareLeases l(1 << 20, milliseconds(1000));
  std::set<uint64_t> ids;
  for (int i = 0; i < 100; ++i) {
    const auto x = l.acquire(100, 0);
    ASSERT_TRUE(x);
    EXPECT_EQ(x->id >> 32, uint64_t(uint32_t(::getpid())));
    ids.insert(x->id);
    if (i % 2) l.release(x->id);
  }
  EXPECT_EQ(ids.size(), 100u);
  EXPECT_FALSE(l.release(uint64_t(1) << 63));  // another process's id
}

TEST(KvShareLeases, RandomTrafficNeverOverlaps) {
  std::mt19937_64 rng(7);
  KvShareLeases l(1 << 16, milliseconds(50), 64);
  struct Live {
    uint64_t id, offset, size;
    int64_t expires;
  };
  std::vector<Live> live;
  for (int64_t now = 0; now < 5000; ++now) {
    std::erase_if(live, [&](const Live& x) { return x.expires <= now; });
    if (rng() % 3 == 0 && !live.empty()) {
      const size_t i = rng() % live.size();
      EXPECT_TRUE(l.release(live[i].id));
      live.erase(live.begin() + std::ptrdiff_t(i));
      continue;
    }
    const uint64_t size = 1 + rng() % 8000;
    const auto x = l.acquire(size, now);
    if (!x) continue;
    const uint64_t rounded = (size + 63) / 64 * 64;
    EXPECT_LE(x->offset + rounded, l.capacity());
    for (const Live& y : live) EXPECT_TRUE(x->offset + rounded <= y.offset || y.offset + y.size <= x->offset);
    live.push_back({x->id, x->offset, rounded, x->expires_ms});
  }
}

TEST(SharedMemory, CreateOpenAndUnlink) {
  const std::string name = "/orchid-test-" + std::to_string(::getpid());
  {
    SharedMemory w = SharedMemory::create(name, 1 << 20);
    ASSERT_EQ(w.size(), size_t(1) << 20);
    std::memcpy(w.data() + 1000, "orchid", 6);
    SharedMemory r = SharedMemory::open(name);
    EXPECT_EQ(r.size(), w.size());
    EXPECT_EQ(std::memcmp(r.data() + 1000, "orchid", 6), 0);
    EXPECT_THROW(SharedMemory::create(name, 4096), Error);  // exists
    SharedMemory moved = std::move(r);
    EXPECT_EQ(std::memcmp(moved.data() + 1000, "orchid", 6), 0);
  }
  EXPECT_THROW(SharedMemory::open(name), Error);  // unlinked with its creator
  EXPECT_THROW(SharedMemory::open("no-slash"), Error);
  EXPECT_THROW(SharedMemory::open("/a/b"), Error);
}

TEST(SharedMemory, AMappingOutlivesTheCreator) {
  const std::string name = "/orchid-test-outlive-" + std::to_string(::getpid());
  std::optional<SharedMemory> w(SharedMemory::create(name, 4096));
  std::memcpy(w->data(), "pages", 5);
  SharedMemory r = SharedMemory::open(name);
  w.reset();  // the exporter is gone: its object unlinked, this mapping still reads
  EXPECT_EQ(std::memcmp(r.data(), "pages", 5), 0);
}

KvPages shared_pages() {
  KvPages kv;
  kv.layout = "cpu fp32: test";
  kv.num_tokens = 3;
  kv.tokens = {5, 6, 7};
  kv.num_full_pages = 1;
  kv.num_sliding_pages = 1;
  auto sh = std::make_shared<KvShare>();
  sh->transport = "shm";
  sh->lease = (uint64_t(1234) << 32) | 9;
  sh->expires_ms = 987654321;
  sh->ranks.push_back({"/orchid-kv-1-0", 4096, 100, 50});
  sh->ranks.push_back({std::string(64, '\x01'), 0, 7, 0});
  kv.share = sh;
  return kv;
}

TEST(KvPagesCodec, ShareRoundTrip) {
  const KvPages kv = shared_pages();
  const KvPages back = decode_kv_pages(encode_kv_pages(kv));
  ASSERT_TRUE(back.share);
  EXPECT_TRUE(back.full.empty() && back.sliding.empty());
  EXPECT_EQ(back.tokens, kv.tokens);
  EXPECT_EQ(back.share->transport, "shm");
  EXPECT_EQ(back.share->lease, kv.share->lease);
  EXPECT_EQ(back.share->expires_ms, kv.share->expires_ms);
  ASSERT_EQ(back.share->ranks.size(), 2u);
  EXPECT_EQ(back.share->ranks[1].region, std::string(64, '\x01'));
  EXPECT_EQ(back.share->ranks[0].offset, 4096u);
  EXPECT_EQ(back.bytes(), 157u);
  // Bytes, no share: as before.
  KvPages plain = kv;
  plain.share.reset();
  plain.full = {1, 2, 3};
  const KvPages p = decode_kv_pages(encode_kv_pages(plain));
  EXPECT_FALSE(p.share);
  EXPECT_EQ(p.full, plain.full);
  EXPECT_EQ(p.bytes(), 3u);
}

TEST(KvPagesCodec, GarbledSharesAreRefused) {
  const std::string good = encode_kv_pages(shared_pages());
  for (size_t cut = 0; cut < good.size(); ++cut) EXPECT_THROW(decode_kv_pages(good.substr(0, cut)), Error);
  // Page bytes and a share at once.
  KvPages both = shared_pages();
  both.full = {1};
  EXPECT_THROW(decode_kv_pages(encode_kv_pages(both)), Error);
  // A share of no ranks.
  KvPages none = shared_pages();
  auto sh = std::make_shared<KvShare>(*none.share);
  sh->ranks.clear();
  none.share = sh;
  EXPECT_THROW(decode_kv_pages(encode_kv_pages(none)), Error);
}

}  // namespace
}  // namespace orchid::runtime
