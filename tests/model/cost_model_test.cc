// The cost model against the figures stated in the specs (which come from the published parameter counts)
// and against first principles on small cases.
#include "model/cost_model.h"

#include <gtest/gtest.h>

namespace orchid::model {
namespace {

TEST(CostModel, ActiveParametersMatchThePublishedCounts) {
  // Published active parameters per token: 3.61B (20b) and 5.13B (120b), counting the unembedding.
  for (auto [name, active] : {std::pair{"20b", 3.61e9}, std::pair{"120b", 5.13e9}}) {
    auto c = preset_config(name);
    const double with_unembedding = double(linear_params_per_token(c) + c.vocab_size * c.hidden_size);
    EXPECT_NEAR(with_unembedding / active, 1.0, 0.01) << name;
  }
}

TEST(CostModel, AttentionFlopsAreCausalAndWindowed) {
  auto c = preset_config("tiny");
  c.layer_types.assign(size_t(c.num_layers), LayerType::kFull);
  const double per_key = 4.0 * double(c.head_dim * c.num_heads) * double(c.num_layers);
  EXPECT_DOUBLE_EQ(prefill_flops(c, 10).attention, per_key * 55);  // 1 + 2 + ... + 10 keys
  c.layer_types.assign(size_t(c.num_layers), LayerType::kSliding);
  c.sliding_window = 4;
  EXPECT_DOUBLE_EQ(prefill_flops(c, 10).attention, per_key * (1 + 2 + 3 + 4 + 6 * 4));
}

TEST(CostModel, DecodeBytesAtBatchOneMatchTheSpecFigure) {
  // hopper.md: 3.71 GB per token for 20b with MXFP4 experts and BF16 attention/lm_head (short context).
  const double b = decode_step_bytes(preset_config("20b"), 1, 1, "mxfp4");
  EXPECT_NEAR(b / 3.71e9, 1.0, 0.01);
  EXPECT_GT(decode_step_bytes(preset_config("20b"), 1, 1, "fp8"), b);
  // Large batches touch every expert once: bytes grow only by the KV cache.
  auto c = preset_config("20b");
  const double b256 = decode_step_bytes(c, 256, 1, "mxfp4"), b512 = decode_step_bytes(c, 512, 1, "mxfp4");
  EXPECT_NEAR(b512 - b256, 256.0 * 2 * 512 * 2 * 24, 1.0);  // K+V, 512 dims, BF16, 24 layers at context 1
}

TEST(CostModel, PrefillFloorMatchesTheSpec) {
  // hopper.md: 20b 8k ≈ 46 ms at FP8 1332 / BF16-attention 742 TFLOP/s.
  EXPECT_NEAR(prefill_floor_seconds(preset_config("20b"), 8192, "fp8", {}), 0.046, 0.002);
  EXPECT_NEAR(usd_per_million_tokens(0.239, 8192, 1), 0.024, 0.0005);  // the seed's own 20b TP1 cell
}

}  // namespace
}  // namespace orchid::model
