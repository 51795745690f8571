// K/V handed over between instances of different tensor parallelism (a prefill instance at TP1 feeding a
// decode instance at TP4, as the seed deploys them): the bytes come in the sender's rank order, each rank
// holding num_heads / ranks consecutive KV heads (model/parallel.h), and are regrouped for the receiver's
// ranks. The layout of a rank's part is the backend's, described by `rows` and `head_bytes`: layer by layer
// (the layers of one pool's kind), K then V, page by page, `rows` rows of the rank's heads' blocks of
// head_bytes[layer] bytes each — [layer][2][page][row][head]. The CPU backend's pages are rows of slots
// (rows = page size, a block = one head's 64 values of a slot); the CUDA backend's are head-major (rows = 1,
// a block = one head's page_size x 64 values).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace orchid::runtime {

// Throws orchid::Error when `from` or `to` does not divide num_heads or the bytes are not what the shape
// says.
std::vector<uint8_t> reshard_kv(std::span<const uint8_t> bytes, int from, int to, int num_heads,
                                int64_t pages, int rows, std::span<const size_t> head_bytes);

// In place between splits (CUDA IPC: every receiver rank copies from the senders' export buffers). A page of
// the head-major layout (rows = 1) is its rank's heads' blocks back to back, so a receiver rank's page is
// a run of blocks from each sender rank whose heads overlap its own: `bytes` at offset `src` of that
// sender's page (of sender_page_bytes) go to offset `dst` of the receiver's page.
struct HeadRun {
  int sender = 0;
  uint64_t src = 0, dst = 0, bytes = 0;
};
// The runs of receiver rank `receiver`'s page of `page_bytes` (its num_heads / to heads' blocks); throws
// orchid::Error when `from` or `to` does not divide num_heads or the page its heads.
std::vector<HeadRun> head_runs(int from, int to, int num_heads, int receiver, uint64_t page_bytes);
// A sender rank's page for a receiver rank's page of `page_bytes` (each holds num_heads / ranks heads).
inline uint64_t sender_page_bytes(int from, int to, uint64_t page_bytes) {
  return page_bytes * uint64_t(to) / uint64_t(from);
}

}  // namespace orchid::runtime
