#include "core/host_memory.h"

#include <algorithm>
#include <charconv>
#include <string>

#include "core/error.h"
#include "core/parse.h"

namespace orchid {

namespace {
std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\n' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

std::optional<uint64_t> parse_u64(std::string_view s) {
  s = trim(s);
  uint64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

// The file's text, or nullopt where it cannot be opened (no /proc, no cgroup v2).
std::optional<std::string> read_file(const std::string& path) {
  try {
    return read_text_file(path, "host memory");
  } catch (const Error&) {
    return std::nullopt;
  }
}

double gib(uint64_t bytes) {
  return double(bytes) / double(uint64_t(1) << 30);
}
}  // namespace

std::optional<uint64_t> parse_mem_available(std::string_view meminfo) {
  constexpr std::string_view kKey = "MemAvailable:";
  for (size_t at = 0; at < meminfo.size();) {
    size_t end = meminfo.find('\n', at);
    if (end == std::string_view::npos) end = meminfo.size();
    std::string_view line = meminfo.substr(at, end - at);
    at = end + 1;
    if (line.substr(0, kKey.size()) != kKey) continue;
    line = trim(line.substr(kKey.size()));
    if (line.size() < 3 || line.substr(line.size() - 2) != "kB") return std::nullopt;
    const auto kib = parse_u64(line.substr(0, line.size() - 2));
    if (!kib || *kib > UINT64_MAX / 1024) return std::nullopt;
    return *kib * 1024;
  }
  return std::nullopt;
}

std::optional<uint64_t> cgroup_memory_left(std::string_view memory_max, std::string_view memory_current) {
  const auto limit = parse_u64(memory_max);  // "max" (no limit) does not parse
  const auto used = parse_u64(memory_current);
  if (!limit || !used) return std::nullopt;
  return *limit > *used ? *limit - *used : 0;
}

std::optional<uint64_t> host_memory_available() {
  std::optional<uint64_t> avail;
  if (const auto meminfo = read_file("/proc/meminfo")) avail = parse_mem_available(*meminfo);
  // The process's own cgroup (v2: one line "0::/path"); a container's limit is often below the host's.
  if (const auto self = read_file("/proc/self/cgroup")) {
    std::string_view s = trim(*self);
    if (s.substr(0, 3) == "0::") {
      const std::string dir = "/sys/fs/cgroup" + std::string(s.substr(3));
      const auto max = read_file(dir + "/memory.max");
      const auto cur = read_file(dir + "/memory.current");
      if (max && cur)
        if (const auto left = cgroup_memory_left(*max, *cur)) avail = avail ? std::min(*avail, *left) : *left;
    }
  }
  return avail;
}

void require_host_memory(uint64_t bytes, std::string_view what, std::string_view advice,
                         std::optional<uint64_t> available) {
  if (!available || bytes <= *available) return;
  fail("{} needs {:.1f} GiB of host memory and {:.1f} GiB is available; {}", what, gib(bytes),
       gib(*available), advice);
}

}  // namespace orchid
