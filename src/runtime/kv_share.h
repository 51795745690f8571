// K/V handed over in place between two instances on one machine (prefill/decode disaggregation without the
// bytes crossing HTTP): the prefill instance copies a finished prompt's pages into its export buffer under a
// lease and answers with where they are; the decode instance maps that buffer (CUDA IPC for GPU memory,
// POSIX shared memory for the CPU backend) and copies the pages into its own at admission. The lease ends
// when the decode instance releases it (once copied, or when the request is dropped) or when it expires,
// whichever is first; the decode side does not copy from a share that is about to expire.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace orchid::runtime {

// One rank's part of a share: its export buffer and where the lease's bytes lie in it, in read_kv's order
// (full-attention pages, then sliding ones).
struct KvShareRank {
  std::string region;  // what the receiver opens: a CUDA IPC memory handle, or a shared-memory object's name
  uint64_t offset = 0;
  uint64_t full_bytes = 0, sliding_bytes = 0;
};

struct KvShare {
  std::string transport;  // "cuda_ipc" | "shm"
  uint64_t lease = 0;
  int64_t expires_ms = 0;  // steady_now_ms() after which the region may hold other pages
  std::vector<KvShareRank> ranks;
  uint64_t bytes() const;
};

// Milliseconds of the steady clock (CLOCK_MONOTONIC, common to the processes of one machine).
int64_t steady_now_ms();

// The ranges of an export buffer held by leases: first fit over [0, capacity), `align`-aligned; a range
// comes back by release() or once its lease expired (collected on every acquire). Thread-safe. Lease ids
// carry the process id in their high half, so an id from another process (or an earlier run) is never
// taken for one of this one.
class KvShareLeases {
 public:
  KvShareLeases(uint64_t capacity, std::chrono::milliseconds ttl, uint64_t align = 256);

  struct Lease {
    uint64_t id = 0, offset = 0;
    int64_t expires_ms = 0;
  };
  // A range of `bytes` held until `now_ms` + ttl, or nullopt when the buffer has no room for it (the caller
  // hands the bytes over instead).
  std::optional<Lease> acquire(uint64_t bytes, int64_t now_ms);
  // False when the lease is unknown (released already, expired, another process's).
  bool release(uint64_t id);
  uint64_t capacity() const { return capacity_; }
  uint64_t bytes_in_use() const;
  size_t leases() const;

 private:
  struct Held {
    uint64_t size = 0, id = 0;
    int64_t expires_ms = 0;
  };
  void expire(int64_t now_ms);  // mu_ held

  uint64_t capacity_, align_;
  std::chrono::milliseconds ttl_;
  mutable std::mutex mu_;
  std::map<uint64_t, Held> held_;  // by offset
  uint64_t id_base_;
};

}  // namespace orchid::runtime
