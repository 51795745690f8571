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

}  // namespace orchid::runtime
