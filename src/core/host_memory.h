// How much host memory a large allocation may still take, so that a model or KV cache that cannot fit is
// refused with a message instead of ending in std::bad_alloc or the kernel's out-of-memory kill.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace orchid {

// MemAvailable of /proc/meminfo text, in bytes (nullopt when the line is missing or malformed).
std::optional<uint64_t> parse_mem_available(std::string_view meminfo);

// What a cgroup v2 limit leaves: memory.max minus memory.current ("max": no limit, nullopt).
std::optional<uint64_t> cgroup_memory_left(std::string_view memory_max, std::string_view memory_current);

// The smaller of MemAvailable and what this process's cgroup limit leaves; nullopt when neither is known
// (not Linux, or /proc unreadable).
std::optional<uint64_t> host_memory_available();

// Throws orchid::Error when `bytes` exceed `available`: "<what> needs X GiB of host memory and Y GiB is
// available; <advice>". Nothing is checked when `available` is unknown.
void require_host_memory(uint64_t bytes, std::string_view what, std::string_view advice,
                         std::optional<uint64_t> available = host_memory_available());

}  // namespace orchid
