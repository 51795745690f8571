// The exposition format as a scraper reads it: every sample belongs to a declared family, names are valid,
// histogram buckets are cumulative and end in +Inf = _count.
#include "server/prometheus.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <regex>
#include <sstream>

namespace orchid::server {
namespace {

TEST(Prometheus, TextFormatIsWellFormed) {
  engine::EngineMetrics m;
  m.kv_full_pages_total = 100;
  m.kv_full_pages_used = 7;
  std::mt19937 rng(3);
  std::exponential_distribution<double> latency(20.0);
  for (int i = 0; i < 1000; ++i) m.time_to_first_token.observe(latency(rng));
  ServerMetrics s;
  s.ready = true;
  const std::string text = prometheus_text(&m, s);

  const std::regex sample(R"re(^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{le="([^"]+)"\})? (\S+)$)re");
  std::map<std::string, std::string> types;
  std::vector<std::pair<std::string, double>> buckets;  // time_to_first_token
  std::map<std::string, double> values;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("# HELP ", 0) == 0) continue;
    if (line.rfind("# TYPE ", 0) == 0) {
      std::istringstream t(line.substr(7));
      std::string name, type;
      t >> name >> type;
      EXPECT_TRUE(type == "gauge" || type == "counter" || type == "histogram") << line;
      if (type == "counter") {
        EXPECT_TRUE(name.ends_with("_total")) << name;
      }
      types[name] = type;
      continue;
    }
    std::smatch mm;
    ASSERT_TRUE(std::regex_match(line, mm, sample)) << line;
    std::string name = mm[1];
    std::string family = name;
    for (const char* suffix : {"_bucket", "_sum", "_count"})
      if (family.ends_with(suffix) && types.count(family.substr(0, family.size() - std::strlen(suffix))))
        family = family.substr(0, family.size() - std::strlen(suffix));
    EXPECT_TRUE(types.count(family)) << "sample before its # TYPE: " << line;
    const double v = mm[4] == "+Inf" ? INFINITY : std::stod(mm[4]);
    values[name + (mm[2].matched ? std::string(mm[2]) : "")] = v;
    if (name == "orchid_time_to_first_token_seconds_bucket") buckets.emplace_back(mm[3], v);
  }
  EXPECT_EQ(values["orchid_kv_full_pages_used"], 7);
  EXPECT_EQ(values["orchid_ready"], 1);
  ASSERT_EQ(buckets.size(), m.time_to_first_token.upper_bounds().size() + 1);
  EXPECT_EQ(buckets.back().first, "+Inf");
  uint64_t cumulative = 0;
  for (size_t i = 0; i + 1 < buckets.size(); ++i) {
    cumulative += m.time_to_first_token.bucket_counts()[i];
    EXPECT_EQ(buckets[i].second, double(cumulative));
    if (i > 0) {
      EXPECT_GE(buckets[i].second, buckets[i - 1].second);
    }
  }
  EXPECT_EQ(buckets.back().second, double(m.time_to_first_token.count()));
  EXPECT_EQ(values["orchid_time_to_first_token_seconds_count"], 1000);
  EXPECT_NEAR(values["orchid_time_to_first_token_seconds_sum"], m.time_to_first_token.sum(), 1e-9 * 1000);
}

TEST(Prometheus, WhileLoadingOnlyServerMetrics) {
  const std::string text = prometheus_text(nullptr, ServerMetrics{});
  EXPECT_NE(text.find("orchid_ready 0"), std::string::npos);
  EXPECT_EQ(text.find("orchid_kv_full_pages_used"), std::string::npos);
}

}  // namespace
}  // namespace orchid::server
