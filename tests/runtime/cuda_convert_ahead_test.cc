// MXFP4 prefill with its FP8 conversions run a layer ahead (ORCHID_MXFP4_CONVERT_AHEAD: the next layer's
// experts converted on a stream of its own while this layer's FP8 GEMMs run on the other SMs) against the
// same backend converting each layer's experts in the layer: the conversions give the same bytes and each
// GEMM tile is computed whole by one CTA whatever the SM count, so the logits must agree bit for bit, on a
// step that takes the conversion path and on one that does not.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "../kernels/gpu_test_util.h"
#include "kernels/moe/moe_layer.h"
#include "runtime/cuda/cuda_backend.h"

namespace orchid::runtime::cuda {
namespace {

CudaBackendOptions options() {
  CudaBackendOptions o;
  o.weights = "mxfp4";
  o.max_step_tokens = 512;
  o.max_step_seqs = 2;
  o.max_model_len = 1024;
  o.kv_pages = 96;
  o.gpu_memory_utilization = 0.2;
  o.cuda_graphs = false;
  return o;
}

// The last position's logits of a prompt of `n` tokens, prefilled in one step.
std::vector<float> prefill_logits(CudaBackend& b, int n) {
  const KvCacheSpec spec = b.kv_spec();
  StepBatch s;
  s.logits = LogitsMode::kSampled;
  for (int t = 0; t < n; ++t) s.tokens.push_back((t * 7919 + 11) % 5000);
  StepSequence q;
  q.num_tokens = n;
  q.start_pos = 0;
  const int32_t pages = (n + spec.page_size - 1) / spec.page_size;
  EXPECT_LE(pages, spec.num_sliding_pages);  // the step's sliding pages do not wrap
  for (int32_t p = 0; p < pages; ++p) {
    s.full_page_table.push_back(p);
    s.sliding_page_table.push_back(p);
  }
  q.num_full_pages = q.num_sliding_pages = pages;
  q.sample = true;
  s.seqs.push_back(q);
  s.params.emplace_back();
  s.params[0].temperature = 0;
  return b.forward(s).logits;
}

std::vector<uint32_t> bits(const std::vector<float>& v) {
  std::vector<uint32_t> b(v.size());
  std::memcpy(b.data(), v.data(), v.size() * 4);
  return b;
}

TEST(CudaConvertAhead, SameLogitsAsConvertingInTheLayer) {
  ORCHID_REQUIRE_GPU_OR_SKIP();
  // The tiny model (8 experts): 400 tokens take the FP8-conversion path, 40 do not.
  kernels::MoeConfig moe;
  moe.experts = 8;
  moe.weights = kernels::MoeWeights::kMxfp4;
  ASSERT_EQ(kernels::mxfp4_path(moe, 400).kind, kernels::Mxfp4Path::kConvertFp8);
  ASSERT_NE(kernels::mxfp4_path(moe, 40).kind, kernels::Mxfp4Path::kConvertFp8);

  unsetenv("ORCHID_MXFP4_CONVERT_AHEAD");
  CudaBackend in_layer("synthetic:tiny", options());
  setenv("ORCHID_MXFP4_CONVERT_AHEAD", "3", 1);
  CudaBackend ahead("synthetic:tiny", options());
  unsetenv("ORCHID_MXFP4_CONVERT_AHEAD");
  for (int n : {400, 40}) {
    const std::vector<float> want = prefill_logits(in_layer, n), got = prefill_logits(ahead, n);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_EQ(bits(got), bits(want)) << n << " tokens";
  }
  // Twice more on the same backend: the sets alternate and each step's first layer converts its own.
  EXPECT_EQ(bits(prefill_logits(ahead, 400)), bits(prefill_logits(in_layer, 400)));
}

}  // namespace
}  // namespace orchid::runtime::cuda
