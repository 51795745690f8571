// K/V handed from one engine to another (the seam of prefill/decode disaggregation), on the CPU backend with
// the golden tiny checkpoint (sliding window 8, pages of 4): a "prefill" engine computes a prompt and exports
// its pages; a "decode" engine imports them, computes only the prompt's last token, and gives exactly the
// tokens and logprobs one engine gives alone, for prompts across page and window boundaries, sampled or
// greedy, next to other requests, and through preemption. K/V of another layout or that does not cover what
// it claims is refused at submission with a clear error.
#include <gtest/gtest.h>

#include <random>

#include "core/error.h"
#include "engine/engine.h"
#include "engine/testing/fake_backend.h"
#include "runtime/cpu/cpu_backend.h"
#include "test_util.h"

namespace orchid::engine {
namespace {

using test::Req;

std::string checkpoint() {
  return std::string(ORCHID_SOURCE_DIR) + "/tests/golden/tiny/checkpoint";
}

std::shared_ptr<runtime::Backend> cpu_backend(int32_t full_pages, int32_t sliding_pages,
                                              const std::string& model = checkpoint()) {
  runtime::cpu::CpuBackendOptions o;
  o.page_size = 4;
  o.num_full_pages = full_pages;
  o.num_sliding_pages = sliding_pages;
  return runtime::cpu::CpuBackend::create(model, o);
}

EngineConfig config(int32_t max_model_len = 128) {
  EngineConfig c;
  c.max_model_len = max_model_len;
  c.max_num_seqs = 8;
  c.max_num_batched_tokens = 64;
  return c;
}

std::vector<Req> requests() {
  std::mt19937 rng(3);
  std::vector<Req> out;
  const int lens[] = {1, 2, 3, 4, 5, 8, 9, 12, 17, 30};
  for (size_t i = 0; i < std::size(lens); ++i) {
    Req r;
    r.prompt = test::tokens(rng, lens[i], 1000);
    r.sampling.temperature = i % 3 == 0 ? 0.0f : 0.9f;
    if (i % 4 == 1) r.sampling.num_logprobs = 2;
    if (i % 5 == 2) r.sampling.repetition_penalty = 1.2f;
    r.seed = 50 + i;
    r.max_tokens = 12;
    r.ignore_eos = true;
    out.push_back(r);
  }
  return out;
}

RequestEvent run_one(Engine& e, RequestSpec spec) {
  auto s = e.submit(std::move(spec));
  while (e.step()) e.check_invariants();
  return s->wait_all();
}

void expect_same(const RequestEvent& got, const RequestEvent& want, size_t i) {
  EXPECT_EQ(got.token_ids, want.token_ids) << "request " << i;
  EXPECT_EQ(got.finish, want.finish) << "request " << i;
  ASSERT_EQ(got.logprobs.size(), want.logprobs.size()) << "request " << i;
  for (size_t k = 0; k < got.logprobs.size(); ++k) {
    EXPECT_EQ(got.logprobs[k].logprob, want.logprobs[k].logprob) << "request " << i;
    EXPECT_EQ(got.logprobs[k].top, want.logprobs[k].top) << "request " << i;
  }
}

// The prefill side: the prompt computed, one token drawn, the pages exported.
std::shared_ptr<const runtime::KvPages> prefill(Engine& e, const Req& r) {
  RequestSpec spec = r.spec();
  spec.max_tokens = 1;
  spec.kv_export = true;
  const RequestEvent ev = run_one(e, std::move(spec));
  EXPECT_EQ(ev.token_ids.size(), 1u);
  EXPECT_TRUE(ev.kv);
  return ev.kv;
}

TEST(KvHandoff, DecodeFromHandedOverPagesEqualsOneEngine) {
  const std::vector<Req> reqs = requests();
  Engine single(cpu_backend(64, 64), config());
  Engine prefill_side(cpu_backend(64, 64), config());
  Engine decode_side(cpu_backend(64, 64), config());
  std::vector<RequestEvent> want;
  for (const Req& r : reqs) want.push_back(run_one(single, r.spec()));
  std::vector<std::shared_ptr<RequestStream>> streams;
  int64_t imported = 0, imported_bytes = 0;
  for (const Req& r : reqs) {
    auto kv = prefill(prefill_side, r);
    ASSERT_TRUE(kv);
    EXPECT_EQ(kv->num_tokens, int32_t(r.prompt.size()));
    RequestSpec spec = r.spec();
    spec.kv_import = kv;
    imported += int64_t(r.prompt.size()) - 1;
    if (r.prompt.size() > 1)
      imported_bytes += int64_t(kv->full.size() + kv->sliding.size());  // else nothing to take
    streams.push_back(decode_side.submit(std::move(spec)));             // all decoded together
  }
  while (decode_side.step()) decode_side.check_invariants();
  for (size_t i = 0; i < reqs.size(); ++i) {
    const RequestEvent got = streams[i]->wait_all();
    expect_same(got, want[i], i);
    EXPECT_EQ(got.usage.imported_tokens, int32_t(reqs[i].prompt.size()) - 1) << i;
  }
  const EngineMetrics m = decode_side.metrics();
  EXPECT_EQ(m.kv_imported_tokens, imported);
  EXPECT_EQ(m.prompt_tokens, int64_t(reqs.size())) << "only each prompt's last token computed";
  EXPECT_EQ(m.kv_import_bytes, imported_bytes);
  EXPECT_GT(prefill_side.metrics().kv_export_bytes, imported_bytes);  // the 1-token prompt's too
  EXPECT_EQ(m.kv_full_pages_used, 0);
  EXPECT_EQ(m.kv_sliding_pages_used, 0);
  EXPECT_EQ(prefill_side.metrics().kv_full_pages_used, 0);
}

TEST(KvHandoff, AnImportedSequencePreemptedLaterRecomputesAndStillAgrees) {
  const std::vector<Req> reqs = requests();
  Engine single(cpu_backend(64, 64), config());
  Engine prefill_side(cpu_backend(64, 64), config());
  // 16 full pages (64 positions) for ten sequences of up to 42: preemption is certain.
  Engine decode_side(cpu_backend(16, 64), config(64));
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const Req& r : reqs) {
    RequestSpec spec = r.spec();
    spec.kv_import = prefill(prefill_side, r);
    streams.push_back(decode_side.submit(std::move(spec)));
  }
  while (decode_side.step()) decode_side.check_invariants();
  EXPECT_GT(decode_side.metrics().preemptions, 0);
  for (size_t i = 0; i < reqs.size(); ++i)
    expect_same(streams[i]->wait_all(), run_one(single, reqs[i].spec()), i);
}

TEST(KvHandoff, PagesThatDoNotFitAreRefusedAtSubmission) {
  Engine prefill_side(cpu_backend(64, 64), config());
  Engine decode_side(cpu_backend(64, 64), config());
  Req r = requests()[8];  // 17 tokens: five pages, the window from position 9 on
  const auto kv = prefill(prefill_side, r);
  ASSERT_TRUE(kv);

  auto refused = [&](runtime::KvPages bad, const std::string& message) {
    RequestSpec spec = r.spec();
    spec.kv_import = std::make_shared<runtime::KvPages>(std::move(bad));
    try {
      decode_side.submit(std::move(spec));
      ADD_FAILURE() << "accepted: " << message;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  };
  runtime::KvPages other = *kv;
  other.layout = "cuda bf16";
  refused(other, "another layout");
  runtime::KvPages short_full = *kv;
  short_full.num_full_pages = 2;
  refused(short_full, "full pages");
  runtime::KvPages late_window = *kv;
  late_window.first_sliding_page += 3;
  refused(late_window, "sliding pages");

  // Another model's pages (synthetic:tiny): its layout differs.
  Engine synthetic(cpu_backend(64, 64, "synthetic:tiny"), config());
  Req s = r;
  const auto foreign = prefill(synthetic, s);
  ASSERT_TRUE(foreign);
  refused(*foreign, "another layout");
  EXPECT_EQ(decode_side.metrics().requests_submitted, 0);
}

TEST(KvHandoff, BackendsWithoutHandoffRefuseIt) {
  Engine e(std::make_shared<testing::FakeBackend>(test::fake_options()), EngineConfig{});
  Req r;
  r.prompt = {1, 2, 3};
  RequestSpec spec = r.spec();
  spec.kv_export = true;
  EXPECT_THROW(e.submit(std::move(spec)), Error);
}

}  // namespace
}  // namespace orchid::engine
