// A communicator between processes (and nodes) over TCP, for the CPU backend's ranks in separate processes
// and as the rendezvous a GPU group bootstraps from (`--dist-init-addr HOST:PORT --nnodes N --node-rank R`,
// as torchrun and SGLang spell it).
//
// Rank 0 listens on HOST:PORT and accepts the other ranks, each of which connects and says its rank. Every
// collective goes through rank 0: it receives the other ranks' buffers in rank order, sums (or concatenates)
// in rank order and sends the result back, so every rank gets bitwise the same result. A star costs
// (N - 1) x 2 x bytes through rank 0's link: fine for CPU ranks and bootstrapping, not a data path for GPUs
// (NCCL is).
#pragma once

#include <memory>
#include <string>

#include "runtime/communicator.h"

namespace orchid::runtime {

// Forms the group or throws orchid::Error naming the address and what failed (rank 0: bind; others: connect,
// retried until `timeout_s`). A peer that disconnects makes the next collective throw orchid::Error.
std::unique_ptr<Communicator> connect_tcp_group(const std::string& addr, int world, int rank,
                                                double timeout_s = 60.0);

}  // namespace orchid::runtime
