// K/V handed from one engine to another (the seam of prefill/decode disaggregation), on the CPU backend with
// the golden tiny checkpoint (sliding window 8, pages of 4): a "prefill" engine computes a prompt and exports
// its pages; a "decode" engine imports them, computes only the prompt's last token, and gives exactly the
// tokens and logprobs one engine gives alone, for prompts across page and window boundaries, sampled or
// greedy, next to other requests, and through preemption. K/V of another layout or that does not cover what
// it claims is refused at submission with a clear error. The same in place (runtime/kv_share.h, shared
// memory): pages left in the prefill side's export object under a lease, taken from there at admission; a
// lease about to end is not copied from (the prompt is computed), a full buffer gives bytes, an object that
// cannot be mapped is refused at submission.
#include <gtest/gtest.h>

#include <random>

#include "core/error.h"
#include "engine/engine.h"
#include "engine/testing/fake_backend.h"
#include "runtime/cpu/cpu_backend.h"
#include "test_util.h"

namespace orchid::engine {
namespace {

using test::expect_same;
using test::Req;

std::string checkpoint() {
  return std::string(ORCHID_SOURCE_DIR) + "/tests/golden/tiny/checkpoint";
}

std::shared_ptr<runtime::Backend> cpu_backend(int32_t full_pages, int32_t sliding_pages,
                                              const std::string& model = checkpoint(),
                                              uint64_t share_bytes = 0, int64_t share_timeout_ms = 60000,
                                              int tp = 1) {
  runtime::cpu::CpuBackendOptions o;
  o.parallel = {tp, 1, tp};
  o.page_size = 4;
  o.num_full_pages = full_pages;
  o.num_sliding_pages = sliding_pages;
  o.kv_share_bytes = share_bytes;
  o.kv_share_timeout_ms = share_timeout_ms;
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

// The prefill side: the prompt computed, one token drawn, the pages exported (in place over `share`).
std::shared_ptr<const runtime::KvPages> prefill(Engine& e, const Req& r, const std::string& share = {}) {
  RequestSpec spec = r.spec();
  spec.max_tokens = 1;
  spec.kv_export = true;
  spec.kv_share = share;
  const RequestEvent ev = run_one(e, std::move(spec));
  EXPECT_EQ(ev.token_ids.size(), 1u);
  EXPECT_TRUE(ev.kv);
  return ev.kv;
}

// Submitting `r` with `kv` handed over is refused with an error that names `message`.
void expect_refused(Engine& e, const Req& r, runtime::KvPages kv, const std::string& message) {
  RequestSpec spec = r.spec();
  spec.kv_import = std::make_shared<runtime::KvPages>(std::move(kv));
  try {
    e.submit(std::move(spec));
    ADD_FAILURE() << "accepted: " << message;
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find(message), std::string::npos) << err.what();
  }
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
    expect_refused(decode_side, r, std::move(bad), message);
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

TEST(KvHandoff, SharedInPlaceEqualsOneEngineAndEveryLeaseEnds) {
  const std::vector<Req> reqs = requests();
  Engine single(cpu_backend(64, 64), config());
  Engine prefill_side(cpu_backend(64, 64, checkpoint(), 1 << 20), config());
  Engine decode_side(cpu_backend(64, 64), config());
  ASSERT_EQ(prefill_side.kv_share_transport(), "shm");
  std::vector<std::shared_ptr<RequestStream>> streams;
  std::vector<uint64_t> leases;
  int64_t shared_bytes = 0, taken = 0;
  for (const Req& r : reqs) {
    auto kv = prefill(prefill_side, r, "shm");
    ASSERT_TRUE(kv && kv->share);
    EXPECT_TRUE(kv->full.empty() && kv->sliding.empty());
    leases.push_back(kv->share->lease);
    if (r.prompt.size() > 1) shared_bytes += int64_t(kv->bytes()), ++taken;
    RequestSpec spec = r.spec();
    spec.kv_import = kv;
    streams.push_back(decode_side.submit(std::move(spec)));
  }
  EXPECT_EQ(prefill_side.metrics().kv_share_leases, int64_t(reqs.size()));
  while (decode_side.step()) decode_side.check_invariants();
  for (size_t i = 0; i < reqs.size(); ++i) {
    const RequestEvent got = streams[i]->wait_all();
    expect_same(got, run_one(single, reqs[i].spec()), i);
    EXPECT_EQ(got.usage.imported_tokens, int32_t(reqs[i].prompt.size()) - 1) << i;
  }
  const EngineMetrics m = decode_side.metrics();
  EXPECT_EQ(m.kv_shared_imports, taken);
  EXPECT_EQ(m.kv_import_bytes, shared_bytes);
  EXPECT_EQ(prefill_side.metrics().kv_shared_exports, int64_t(reqs.size()));
  for (uint64_t lease : leases) EXPECT_TRUE(prefill_side.release_kv_share(lease));
  EXPECT_FALSE(prefill_side.release_kv_share(leases[0]));  // once
  EXPECT_EQ(prefill_side.metrics().kv_share_leases, 0);
}

TEST(KvHandoff, ASharedImportAboutToExpireIsComputedHere) {
  const Req r = requests()[9];  // 30 tokens
  Engine single(cpu_backend(64, 64), config());
  // Leases of one second: inside the decode side's two-second margin from the start.
  Engine prefill_side(cpu_backend(64, 64, checkpoint(), 1 << 20, 1000), config());
  Engine decode_side(cpu_backend(64, 64), config());
  RequestSpec spec = r.spec();
  spec.kv_import = prefill(prefill_side, r, "shm");
  ASSERT_TRUE(spec.kv_import->share);
  const RequestEvent got = run_one(decode_side, std::move(spec));
  expect_same(got, run_one(single, r.spec()), 0);
  EXPECT_EQ(got.usage.imported_tokens, 0);
  EXPECT_EQ(decode_side.metrics().kv_shared_imports, 0);
}

TEST(KvHandoff, AFullExportBufferGivesBytesAndAnUnmappableShareIsRefused) {
  const Req r = requests()[9];
  Engine prefill_side(cpu_backend(64, 64, checkpoint(), 256), config());  // no room for 30 tokens
  const auto kv = prefill(prefill_side, r, "shm");
  ASSERT_TRUE(kv);
  EXPECT_FALSE(kv->share);
  EXPECT_GT(kv->full.size(), 0u);
  EXPECT_EQ(prefill_side.metrics().kv_shared_exports, 0);

  Engine big(cpu_backend(64, 64, checkpoint(), 1 << 20), config());
  const auto shared = prefill(big, r, "shm");
  ASSERT_TRUE(shared && shared->share);
  Engine decode_side(cpu_backend(64, 64), config());
  auto refused = [&](const runtime::KvShare& share, const std::string& message) {
    runtime::KvPages bad = *shared;
    bad.share = std::make_shared<runtime::KvShare>(share);
    expect_refused(decode_side, r, std::move(bad), message);
  };
  runtime::KvShare gone = *shared->share;
  gone.ranks[0].region = "/orchid-kv-1-999999";
  refused(gone, "No such file");
  runtime::KvShare past = *shared->share;
  past.ranks[0].offset = uint64_t(1) << 30;
  refused(past, "outside");
  runtime::KvShare ipc = *shared->share;
  ipc.transport = "cuda_ipc";
  refused(ipc, "cuda_ipc");
  runtime::KvShare foreign = *shared->share;
  foreign.ranks[0].region = "/etc-passwd";
  refused(foreign, "not an orchid export object");
  EXPECT_EQ(decode_side.metrics().requests_submitted, 0);
}

// A prefill instance and a decode instance of other tensor-parallel splits (the golden tiny model's 2 KV
// heads over 1 or 2 ranks): the pages are regrouped by KV head on the way in, as bytes or in place, and the
// decode side draws what it draws computing the prompts itself (the same split on both sides of that
// comparison: TP changes the order of the O projection's sums, not the K/V of a head).
TEST(KvHandoff, AcrossTensorParallelSplits) {
  const std::vector<Req> reqs = requests();
  for (auto [from, to] : {std::pair{1, 2}, std::pair{2, 1}}) {
    for (bool shared : {false, true}) {
      SCOPED_TRACE(::testing::Message()
                   << "TP" << from << " -> TP" << to << (shared ? " in place" : " as bytes"));
      Engine prefill_side(cpu_backend(64, 64, checkpoint(), shared ? 1 << 20 : 0, 60000, from), config());
      Engine decode_side(cpu_backend(64, 64, checkpoint(), 0, 60000, to), config());
      Engine single(cpu_backend(64, 64, checkpoint(), 0, 60000, to), config());
      std::vector<uint64_t> leases;
      for (size_t i = 0; i < reqs.size(); ++i) {
        if (reqs[i].prompt.size() < 2) continue;  // nothing to hand over
        RequestSpec spec = reqs[i].spec();
        spec.kv_import = prefill(prefill_side, reqs[i], shared ? "shm" : "");
        ASSERT_EQ(spec.kv_import->ranks, from);
        ASSERT_EQ(bool(spec.kv_import->share), shared);
        if (shared) leases.push_back(spec.kv_import->share->lease);
        const RequestEvent got = run_one(decode_side, std::move(spec));
        EXPECT_EQ(got.usage.imported_tokens, int32_t(reqs[i].prompt.size()) - 1) << i;
        const RequestEvent want = run_one(single, reqs[i].spec());
        EXPECT_EQ(got.token_ids, want.token_ids) << "request " << i;
      }
      for (uint64_t lease : leases) EXPECT_TRUE(prefill_side.release_kv_share(lease));
    }
  }
}

}  // namespace
}  // namespace orchid::engine
