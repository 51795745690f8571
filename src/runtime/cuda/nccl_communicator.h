// The production collectives: NCCL, one GPU per rank. A node's GPUs are ranks of one process (one thread per
// GPU, ncclCommInitAll); ranks in several processes (--nnodes) share an ncclUniqueId through the TCP
// rendezvous and call ncclCommInitRank. NVLink SHARP (NVLS) is left as the environment sets it
// (NCCL_NVLS_ENABLE): orchid never creates multicast objects itself.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "runtime/communicator.h"
#include "runtime/cuda/device_communicator.h"

namespace orchid::runtime::cuda {

bool nccl_available();  // built with NCCL
std::string nccl_version();

// One communicator per device of `devices` (rank i on devices[i]), one process.
std::vector<std::unique_ptr<DeviceCommunicator>> make_nccl_group(const std::vector<int>& devices);

// This process's rank of a group spread over processes: `bootstrap` (the TCP group, same ranks) carries
// rank 0's ncclUniqueId to the others. Uses the current device.
std::unique_ptr<DeviceCommunicator> make_nccl_rank(Communicator& bootstrap);

// Sub-groups of a group: ranks with the same color form one, ordered by their rank in the parent
// (ncclCommSplit). `parents` are this process's ranks of the group (one call splits them all together);
// every process of the group calls it.
std::vector<std::unique_ptr<DeviceCommunicator>> split_nccl(const std::vector<DeviceCommunicator*>& parents,
                                                            const std::vector<int>& colors);

}  // namespace orchid::runtime::cuda
