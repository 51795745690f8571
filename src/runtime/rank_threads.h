// Runs one function per rank of a group that lives in this process, rank 0 on the calling thread and the
// others on threads of their own, and reports failures as the group's root cause: a rank that fails calls
// `abort_group(rank)` so that the others, blocked in a collective, fail too; the first orchid::Error among
// the failures is rethrown (the rank's own message, not the aborts it caused), else the first failure.
#pragma once

#include <cstddef>
#include <functional>

namespace orchid::runtime {

void run_on_rank_threads(size_t ranks, const std::function<void(size_t rank)>& fn,
                         const std::function<void(size_t rank)>& abort_group);

}  // namespace orchid::runtime
