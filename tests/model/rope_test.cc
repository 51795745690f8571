// RoPE tables against transformers' own YaRN computation (tests/golden/rope_yarn.json, made by
// tools/golden/make_rope_golden.py).
#include "model/rope.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>

namespace orchid::model {
namespace {

TEST(Rope, YarnMatchesTransformers) {
  std::ifstream f(std::string(ORCHID_SOURCE_DIR) + "/tests/golden/rope_yarn.json");
  ASSERT_TRUE(f) << "golden file missing";
  auto j = nlohmann::json::parse(f);
  ASSERT_GE(j["cases"].size(), 3u);
  for (const auto& c : j["cases"]) {
    RopeConfig r;
    r.yarn = true;
    r.theta = c["rope_theta"];
    r.factor = c["factor"];
    r.beta_fast = c["beta_fast"];
    r.beta_slow = c["beta_slow"];
    r.original_max_position = c["original_max_position_embeddings"];
    r.truncate = c["truncate"];
    auto t = rope_tables(r, c["head_dim"]);
    const auto& ref = c["inv_freq"];
    ASSERT_EQ(t.inv_freq.size(), ref.size());
    for (size_t i = 0; i < ref.size(); ++i) {
      const double want = ref[i];
      // transformers computes in fp32, orchid in double rounded once: a few ulps apart at most.
      EXPECT_NEAR(t.inv_freq[i], want, 4e-7 * std::abs(want)) << c["name"] << " i=" << i;
    }
    EXPECT_NEAR(t.concentration, double(c["attention_factor"]), 1e-6) << c["name"];
  }
}

TEST(Rope, PlainRopeHasNoConcentration) {
  RopeConfig r;
  r.yarn = false;
  r.theta = 10000;
  auto t = rope_tables(r, 64);
  EXPECT_EQ(t.concentration, 1.0f);
  EXPECT_FLOAT_EQ(t.inv_freq[1], float(std::pow(10000.0, -2.0 / 64)));
}

}  // namespace
}  // namespace orchid::model
