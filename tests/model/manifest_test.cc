#include "model/manifest.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include "core/error.h"
#include "model/synthetic.h"

namespace orchid::model {
namespace {

TEST(Manifest, NamesAndCounts) {
  auto c = preset_config("20b");
  auto m = gpt_oss_manifest(c);
  // 3 global tensors + 19 per layer (the published 20b checkpoint has 459).
  EXPECT_EQ(m.size(), 3u + 19u * 24u);
  EXPECT_EQ(m.front().name, "model.embed_tokens.weight");
  bool found = false;
  for (const auto& s : m)
    if (s.name == "model.layers.23.mlp.experts.gate_up_proj_blocks") {
      found = true;
      EXPECT_EQ(s.shape, (std::vector<int64_t>{32, 5760, 90, 16}));
      EXPECT_EQ(s.dtypes.front(), DType::kU8);
    }
  EXPECT_TRUE(found);
}

TEST(Manifest, WeightBytesMatchThePublishedCheckpoint) {
  // The published gpt-oss-20b shards total 13,761,316,904 bytes, headers (~52 KB) included.
  const uint64_t bytes = weight_bytes(preset_config("20b"), "mxfp4");
  EXPECT_LT(bytes, 13'761'316'904ull);
  EXPECT_GT(bytes, 13'761'316'904ull - 100'000ull);
  // Expert formats order as their bits per weight.
  EXPECT_LT(weight_bytes(preset_config("20b"), "fp8"), weight_bytes(preset_config("20b"), "bf16"));
  EXPECT_THROW(weight_bytes(preset_config("20b"), "int4"), Error);
}

TEST(Manifest, ValidateNamesTheProblem) {
  auto c = preset_config("tiny");
  auto m = gpt_oss_manifest(c);
  auto ck = synthetic_checkpoint(c, 0);
  EXPECT_NO_THROW(validate_checkpoint(ck, m));

  auto expect = [&](io::Checkpoint k, const std::string& words) {
    try {
      validate_checkpoint(k, m);
      ADD_FAILURE() << words;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  {
    io::Checkpoint k;
    for (const auto& [n, v] : ck.tensors())
      if (n != "model.layers.2.self_attn.sinks") k.add(v);
    expect(k, "missing tensor 'model.layers.2.self_attn.sinks'");
  }
  {
    io::Checkpoint k;
    for (auto [n, v] : ck.tensors()) {
      if (n == "model.norm.weight") v.shape = {7};
      k.add(v);
    }
    expect(k, "'model.norm.weight' has shape [7], expected [128]");
  }
  {
    io::Checkpoint k;
    for (auto [n, v] : ck.tensors()) {
      if (n == "model.layers.0.mlp.experts.down_proj_scales") v.dtype = DType::kF32;
      k.add(v);
    }
    expect(k, "dtype F32, expected U8");
  }
}

TEST(Manifest, DenseExpertsLayout) {
  auto c = preset_config("tiny");
  c.experts_mxfp4 = false;
  bool found = false;
  for (const auto& s : gpt_oss_manifest(c))
    if (s.name == "model.layers.0.mlp.experts.down_proj") {
      found = true;
      EXPECT_EQ(s.shape, (std::vector<int64_t>{c.num_experts, c.intermediate_size, c.hidden_size}));
    }
  EXPECT_TRUE(found);
}

}  // namespace
}  // namespace orchid::model
