// K/V handed between two CUDA backends on one GPU through host memory (prefill/decode disaggregation): a
// prompt prefilled on one backend, its pages read out and written into other pages of a second backend, and
// the next decode step on each gives the same logits bit for bit. Pages of another layout are refused. The
// same with an FP8 (e4m3) KV cache, whose pages are half the bytes and whose layout is not the BF16 one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "../kernels/gpu_test_util.h"
#include "core/error.h"
#include "runtime/cuda/cuda_backend.h"

namespace orchid::runtime::cuda {
namespace {

CudaBackendOptions small_options(KvCacheDtype kv = KvCacheDtype::kBf16) {
  CudaBackendOptions o;
  o.kv_cache_dtype = kv;
  o.weights = "bf16";
  o.max_step_tokens = 256;
  o.max_step_seqs = 4;
  o.max_model_len = 512;
  o.kv_pages = 64;
  o.gpu_memory_utilization = 0.2;
  o.cuda_graphs = false;
  return o;
}

// The prompt every test hands over: 45 tokens, across page boundaries.
std::vector<int32_t> test_prompt() {
  std::vector<int32_t> prompt;
  for (int t = 0; t < 45; ++t) prompt.push_back((t * 7919 + 11) % 5000);
  return prompt;
}

// Pages 0.. of a sequence of `tokens` tokens.
std::vector<int32_t> first_pages(int32_t tokens, int32_t page_size) {
  std::vector<int32_t> ids;
  for (int32_t p = 0; p < (tokens + page_size - 1) / page_size; ++p) ids.push_back(p);
  return ids;
}

// ||got - want|| / ||want||; the sizes must agree.
double rel_l2(const std::vector<float>& got, const std::vector<float>& want) {
  EXPECT_EQ(got.size(), want.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    num += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    den += double(want[i]) * want[i];
  }
  return std::sqrt(num / den);
}

// One sequence of `tokens` from `start`, pages first_page.. of both pools, sampled greedily with its logits.
StepBatch sequence_step(const KvCacheSpec& spec, const std::vector<int32_t>& tokens, int32_t start,
                        int32_t first_page) {
  StepBatch b;
  b.logits = LogitsMode::kSampled;
  b.tokens = tokens;
  StepSequence s;
  s.num_tokens = int32_t(tokens.size());
  s.start_pos = start;
  const int32_t pages = (start + s.num_tokens + spec.page_size - 1) / spec.page_size;
  for (int32_t p = 0; p < pages; ++p) {
    b.full_page_table.push_back(first_page + p);
    b.sliding_page_table.push_back(spec.sliding_window > 0 ? first_page + p : kNoPage);
  }
  s.num_full_pages = s.num_sliding_pages = pages;
  s.sample = true;
  b.seqs.push_back(s);
  b.params.emplace_back();
  b.params[0].temperature = 0;
  return b;
}

void handoff_decodes_alike(KvCacheDtype dtype) {
  CudaBackend a("synthetic:tiny", small_options(dtype)), b("synthetic:tiny", small_options(dtype));
  ASSERT_TRUE(a.supports_kv_handoff());
  ASSERT_EQ(a.kv_layout(), b.kv_layout());
  const KvCacheSpec spec = a.kv_spec();
  const std::vector<int32_t> prompt = test_prompt();
  a.forward(sequence_step(spec, prompt, 0, 0));
  const int32_t pages = (45 + spec.page_size - 1) / spec.page_size;
  std::vector<int32_t> on_a, on_b;  // page p of the sequence: p on the first backend, 20 + p on the second
  for (int32_t p = 0; p < pages; ++p) {
    on_a.push_back(p);
    on_b.push_back(20 + p);
  }
  const KvPages kv = a.read_kv(on_a, on_a, 0, 45);
  EXPECT_GT(kv.full.size(), 0u);
  b.write_kv(kv, on_b, on_b);
  const StepOutput next_a = a.forward(sequence_step(spec, {123}, 45, 0));
  const StepOutput next_b = b.forward(sequence_step(spec, {123}, 45, 20));
  ASSERT_EQ(next_a.logits.size(), next_b.logits.size());
  EXPECT_EQ(next_a.logits, next_b.logits);
  EXPECT_EQ(next_a.samples[0].token, next_b.samples[0].token);

  KvPages other = kv;
  other.layout = "cpu fp32";
  EXPECT_THROW(b.write_kv(other, on_b, on_b), Error);
  KvPages truncated = kv;
  truncated.full.resize(truncated.full.size() / 2);
  EXPECT_THROW(b.write_kv(truncated, on_b, on_b), Error);
}

TEST(CudaKvHandoff, PagesWrittenIntoAnotherBackendDecodeAlike) {
  ORCHID_REQUIRE_GPU_OR_SKIP();
  handoff_decodes_alike(KvCacheDtype::kBf16);
}

TEST(CudaKvHandoff, Fp8PagesWrittenIntoAnotherBackendDecodeAlike) {
  ORCHID_REQUIRE_GPU_OR_SKIP();
  handoff_decodes_alike(KvCacheDtype::kFp8E4M3);
}

// An FP8 cache against a BF16 one on the same prompt: other layouts (pages of one refused by the other), the
// full-attention pages half the bytes, and the next step's logits close but not equal (e4m3 keeps 3 mantissa
// bits of K and V: a few 1e-2 relative on the logits of this tiny random model).
TEST(CudaKvHandoff, Fp8CacheAgainstBf16) {
  ORCHID_REQUIRE_GPU_OR_SKIP();
  CudaBackend bf16("synthetic:tiny", small_options()),
      fp8("synthetic:tiny", small_options(KvCacheDtype::kFp8E4M3));
  EXPECT_NE(bf16.kv_layout(), fp8.kv_layout());
  const KvCacheSpec spec = bf16.kv_spec();
  const std::vector<int32_t> prompt = test_prompt();
  bf16.forward(sequence_step(spec, prompt, 0, 0));
  fp8.forward(sequence_step(fp8.kv_spec(), prompt, 0, 0));
  const std::vector<int32_t> ids = first_pages(45, spec.page_size);
  const KvPages k16 = bf16.read_kv(ids, {}, 0, 45), k8 = fp8.read_kv(ids, {}, 0, 45);
  EXPECT_EQ(k8.full.size() * 2, k16.full.size());
  EXPECT_THROW(fp8.write_kv(k16, ids, {}), Error);
  EXPECT_THROW(bf16.write_kv(k8, ids, {}), Error);
  const StepOutput a = bf16.forward(sequence_step(spec, {123}, 45, 0));
  const StepOutput b = fp8.forward(sequence_step(fp8.kv_spec(), {123}, 45, 0));
  const double rel = rel_l2(b.logits, a.logits);
  std::printf("  next-step logits, FP8 vs BF16 KV cache: rel. L2 %.3e\n", rel);
  EXPECT_GT(rel, 0.0);  // the cache is really e4m3
  EXPECT_LT(rel, 0.1);  // and still the same model
}

// Pages of a TP1 instance written into a TP2 one (both ranks on this GPU, in-process collectives): regrouped
// by KV head (runtime/kv_reshard.h), the next step's logits are those of the TP2 instance computing the
// prompt itself, up to the BF16 noise of TP's other summation order.
TEST(CudaKvHandoff, PagesOfAnotherTensorParallelSplit) {
  ORCHID_REQUIRE_GPU_OR_SKIP();
  CudaBackendOptions tp2 = small_options();
  tp2.parallel = {2, 1, 2};
  tp2.share_device = true;
  CudaBackend a("synthetic:tiny", small_options()), b("synthetic:tiny", tp2), c("synthetic:tiny", tp2);
  EXPECT_EQ(a.kv_layout(), b.kv_layout());
  const KvCacheSpec spec = a.kv_spec();
  const std::vector<int32_t> prompt = test_prompt();
  a.forward(sequence_step(spec, prompt, 0, 0));
  c.forward(sequence_step(c.kv_spec(), prompt, 0, 0));
  const std::vector<int32_t> ids = first_pages(45, spec.page_size);
  const KvPages kv = a.read_kv(ids, ids, 0, 45);
  EXPECT_EQ(kv.ranks, 1);
  b.write_kv(kv, ids, ids);
  const StepOutput got = b.forward(sequence_step(b.kv_spec(), {123}, 45, 0));
  const StepOutput want = c.forward(sequence_step(c.kv_spec(), {123}, 45, 0));
  const double rel = rel_l2(got.logits, want.logits);
  std::printf("  TP1 pages in a TP2 instance: next-step logits rel. L2 %.3e against its own prefill\n", rel);
  EXPECT_LT(rel, 2e-2);
  EXPECT_EQ(got.samples[0].token, want.samples[0].token);
  // And back: the TP2 instance's pages (two parts) into the TP1 one.
  const KvPages back = c.read_kv(ids, ids, 0, 45);
  EXPECT_EQ(back.ranks, 2);
  EXPECT_NO_THROW(a.write_kv(back, ids, ids));
}

}  // namespace
}  // namespace orchid::runtime::cuda
