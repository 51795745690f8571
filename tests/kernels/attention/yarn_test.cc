// The RoPE kernel's host tables (yarn_inv_freq) and the reference's cos/sin of the fp32 angle against
// transformers' gpt-oss rotary embedding itself, including its cos/sin at positions up to 131071
// (golden file made by tools/golden/yarn_golden.py).
#include "kernels/attention/yarn.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <string>

#include "tests/kernels/attention/attention_reference.h"

namespace orchid::kernels::attention {
namespace {

nlohmann::json load_golden() {
  const std::string path = std::string(ORCHID_SOURCE_DIR) + "/tests/kernels/attention/golden/yarn.json";
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  return nlohmann::json::parse(in);
}

model::RopeConfig rope_config(const nlohmann::json& p) {
  model::RopeConfig r;
  r.theta = p.at("rope_theta").get<double>();
  r.yarn = p.at("rope_type").get<std::string>() == "yarn";
  if (r.yarn) {
    r.factor = p.at("factor").get<double>();
    r.beta_fast = p.at("beta_fast").get<double>();
    r.beta_slow = p.at("beta_slow").get<double>();
    r.original_max_position = p.at("original_max_position_embeddings").get<int64_t>();
    r.truncate = p.at("truncate").get<bool>();
  }
  return r;
}

TEST(Yarn, InvFreqMatchesTransformers) {
  const auto golden = load_golden();
  ASSERT_GE(golden.at("cases").size(), 4u);
  for (const auto& c : golden.at("cases")) {
    SCOPED_TRACE(c.at("name").get<std::string>());
    const RopeFrequencies f =
        yarn_inv_freq(rope_config(c.at("rope_parameters")), c.at("head_dim").get<int>());
    const auto& want = c.at("inv_freq");
    ASSERT_EQ(f.inv_freq.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      // transformers computes in fp32 (pow, divisions, ramp), this in double rounded once: a few fp32 ulps.
      const double w = want[i].get<double>();
      EXPECT_NEAR(f.inv_freq[i], w, 4e-7 * w) << "inv_freq[" << i << "]";
    }
    EXPECT_NEAR(f.concentration, c.at("concentration").get<double>(), 1e-7);
  }
}

TEST(Yarn, ReferenceCosSinMatchesTransformers) {
  const auto golden = load_golden();
  for (const auto& c : golden.at("cases")) {
    SCOPED_TRACE(c.at("name").get<std::string>());
    // The golden frequencies themselves, so that this checks the cos/sin arithmetic alone (at position
    // 131071 an ulp of inv_freq moves the angle by 0.008 rad).
    RopeFrequencies f;
    for (const auto& v : c.at("inv_freq")) f.inv_freq.push_back(v.get<float>());
    f.concentration = c.at("concentration").get<float>();
    const auto& positions = c.at("positions");
    for (size_t k = 0; k < positions.size(); ++k) {
      float cs[32], sn[32];
      reference::rope_cos_sin(positions[k].get<int>(), f, cs, sn);
      for (int j = 0; j < 32; ++j) {
        EXPECT_NEAR(cs[j], c.at("cos")[k][size_t(j)].get<double>(), 1e-6)
            << "pos " << positions[k] << " j " << j;
        EXPECT_NEAR(sn[j], c.at("sin")[k][size_t(j)].get<double>(), 1e-6)
            << "pos " << positions[k] << " j " << j;
      }
    }
  }
}

}  // namespace
}  // namespace orchid::kernels::attention
