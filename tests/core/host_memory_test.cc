#include "core/host_memory.h"

#include <gtest/gtest.h>

#include <string>

#include "core/error.h"

namespace orchid {
namespace {

TEST(HostMemory, ParsesMemAvailable) {
  const std::string meminfo =
      "MemTotal:       24608776 kB\n"
      "MemFree:         1024000 kB\n"
      "MemAvailable:   22145320 kB\n"
      "Buffers:           12345 kB\n";
  EXPECT_EQ(parse_mem_available(meminfo), uint64_t(22145320) * 1024);
  EXPECT_EQ(parse_mem_available("MemAvailable: 7 kB"), uint64_t(7) * 1024);  // last line, no newline
  EXPECT_FALSE(parse_mem_available("MemTotal: 100 kB\nMemFree: 50 kB\n").has_value());
  EXPECT_FALSE(parse_mem_available("MemAvailable: lots kB\n").has_value());
  EXPECT_FALSE(parse_mem_available("MemAvailable: 100\n").has_value());  // no unit
  EXPECT_FALSE(parse_mem_available("MemAvailable: 99999999999999999999 kB\n").has_value());
  EXPECT_FALSE(parse_mem_available("").has_value());
}

TEST(HostMemory, CgroupLimit) {
  EXPECT_EQ(cgroup_memory_left("8589934592\n", "1073741824\n"), uint64_t(7) << 30);
  EXPECT_EQ(cgroup_memory_left("1000\n", "4000\n"), uint64_t(0));  // over its limit already
  EXPECT_FALSE(cgroup_memory_left("max\n", "1073741824\n").has_value());
  EXPECT_FALSE(cgroup_memory_left("", "").has_value());
}

TEST(HostMemory, RequireNamesWhatAndWhatToChange) {
  const uint64_t gib = uint64_t(1) << 30;
  EXPECT_NO_THROW(require_host_memory(10 * gib, "the weights", "use less", 10 * gib));
  EXPECT_NO_THROW(require_host_memory(100 * gib, "the weights", "use less", std::nullopt));  // unknown
  try {
    require_host_memory(65 * gib + gib / 2, "synthetic:120b's weights", "use synthetic:tiny", 20 * gib);
    FAIL() << "expected orchid::Error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("synthetic:120b's weights needs 65.5 GiB"), std::string::npos) << m;
    EXPECT_NE(m.find("20.0 GiB is available"), std::string::npos) << m;
    EXPECT_NE(m.find("use synthetic:tiny"), std::string::npos) << m;
  }
}

#ifdef __linux__
TEST(HostMemory, ReadsThisHost) {
  const auto avail = host_memory_available();
  ASSERT_TRUE(avail.has_value());
  EXPECT_GT(*avail, uint64_t(0));
}
#endif

}  // namespace
}  // namespace orchid
