// Speculative decoding in the engine: drafts change how many tokens a step yields, never which. Every request
// gets exactly the tokens, text, finish and logprobs it gets without speculation, for every k, with drafts
// that are all right, partly right or wrong, while stop strings, stop ids, min_tokens, max_tokens,
// preemption, prefix hits and aborts happen; and no KV page is left behind.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>

#include "core/error.h"
#include "engine/backend_proposer.h"
#include "engine/draft_model_proposer.h"
#include "engine/engine.h"
#include "engine/ngram_proposer.h"
#include "runtime/cpu/cpu_backend.h"
#include "test_util.h"

namespace orchid::engine {
namespace {

using test::Req;

// ---- The n-gram proposer ----

std::vector<int32_t> ngram(const std::vector<int32_t>& tokens, int32_t max_tokens, int32_t lo = 1,
                           int32_t hi = 3) {
  std::vector<int32_t> draft;
  NgramProposer(lo, hi).propose_one(tokens, max_tokens, draft);
  return draft;
}

// What the backend's head proposed after a step, handed back only to the sequence it was made for, as it
// still is, and at most max_tokens of it.
TEST(BackendProposer, HandsBackWhatWasMadeForTheSequenceAsItIs) {
  BackendProposer p(4);
  EXPECT_EQ(p.num_propose(), 4);
  const std::vector<int32_t> seq = {5, 6, 7}, longer = {5, 6, 7, 8};
  p.store(1, 3, std::vector<int32_t>{10, 11, 12, 13});
  p.store(2, 4, std::vector<int32_t>{20, 21});
  auto propose = [&](int64_t id, const std::vector<int32_t>& tokens, int32_t most) {
    std::vector<int32_t> draft;
    const DraftRequest r{id, tokens, 1, most, nullptr, &draft};
    p.propose(std::span<const DraftRequest>(&r, 1));
    return draft;
  };
  EXPECT_EQ(propose(1, seq, 4), (std::vector<int32_t>{10, 11, 12, 13}));
  EXPECT_EQ(propose(1, seq, 2), (std::vector<int32_t>{10, 11}));  // max_tokens
  EXPECT_TRUE(propose(1, longer, 4).empty());                     // made for another length: stale
  EXPECT_EQ(propose(2, longer, 4), (std::vector<int32_t>{20, 21}));
  EXPECT_TRUE(propose(3, seq, 4).empty());  // nothing stored
  p.store(1, 4, std::vector<int32_t>{30});  // the next step's replaces it
  EXPECT_EQ(propose(1, longer, 4), (std::vector<int32_t>{30}));
  p.forget(1);
  p.forget(2);
  EXPECT_EQ(p.num_tracked(), 0u);
  EXPECT_TRUE(propose(1, longer, 4).empty());
}

TEST(NgramProposer, CopiesWhatFollowedTheLatestEarlierOccurrence) {
  // Suffix [7, 8] occurs at 1 (followed by 1, 2) and at 5 (followed by 3, 4): the latest wins.
  EXPECT_EQ(ngram({0, 7, 8, 1, 2, 7, 8, 3, 4, 9, 7, 8}, 2), (std::vector<int32_t>{3, 4}));
  // The longest suffix that occurs wins over a later shorter one: [5, 7, 8] at 0 vs [7, 8] at 4.
  EXPECT_EQ(ngram({5, 7, 8, 1, 6, 7, 8, 2, 5, 7, 8}, 1), (std::vector<int32_t>{1}));
  // Only as far as max_tokens.
  EXPECT_EQ(ngram({1, 2, 3, 4, 5, 6, 1, 2}, 3), (std::vector<int32_t>{3, 4, 5}));
}

TEST(NgramProposer, ALoopShorterThanTheProposalRepeats) {
  // Period 2: the occurrence at 4 is followed by one known token, then the proposal continues the loop.
  EXPECT_EQ(ngram({9, 9, 9, 1, 2, 1, 2}, 5, 2, 2), (std::vector<int32_t>{1, 2, 1, 2, 1}));
  EXPECT_EQ(ngram({4, 4}, 3, 1, 1), (std::vector<int32_t>{4, 4, 4}));
}

TEST(NgramProposer, NothingWithoutAMatchOfTheShortestLength) {
  EXPECT_TRUE(ngram({1, 2, 3, 4}, 3).empty());
  EXPECT_TRUE(ngram({1}, 3).empty());
  EXPECT_TRUE(ngram({1, 2, 3, 1}, 3, 2, 3).empty());  // only a 1-gram repeats
  EXPECT_THROW(NgramProposer(0, 2), Error);
  EXPECT_THROW(NgramProposer(3, 2), Error);
}

// ---- A proposer that knows the answers ----

// Proposes each sequence's reference continuation (its output without drafts), spoiled at a position that
// varies with the sequence's length and of a length that varies too, so that steps accept every draft,
// some, or none.
class OracleProposer final : public Proposer {
 public:
  void add(std::vector<int32_t> full) { refs_.push_back(std::move(full)); }
  void propose(std::span<const DraftRequest> requests) override {
    for (const DraftRequest& r : requests) {
      const std::vector<int32_t>* ref = nullptr;
      for (const auto& f : refs_)
        if (f.size() >= r.tokens.size() && std::equal(r.tokens.begin(), r.tokens.end(), f.begin())) ref = &f;
      const size_t len = r.tokens.size();
      const int32_t n = std::min<int32_t>(r.max_tokens, int32_t(1 + (len * 7) % 6));
      const int32_t wrong = int32_t((len * 13) % 9);  // >= n: all right (if the reference reaches)
      for (int32_t j = 0; j < n; ++j) {
        const size_t at = len + size_t(j);
        int32_t t = ref && at < ref->size() ? (*ref)[at] : int32_t(1 + at % 5);
        if (j == wrong) t = t == 1 ? 2 : 1;
        r.draft->push_back(t);
      }
      ++proposals;
    }
  }
  void forget(int64_t id) override { forgotten.insert(id); }

  int64_t proposals = 0;
  std::set<int64_t> forgotten;

 private:
  std::vector<std::vector<int32_t>> refs_;
};

void expect_same(const RequestEvent& got, const RequestEvent& want, const std::string& what) {
  EXPECT_EQ(got.token_ids, want.token_ids) << what;
  EXPECT_EQ(got.text, want.text) << what;
  EXPECT_EQ(got.finish, want.finish) << what;
  EXPECT_EQ(got.stop_token, want.stop_token) << what;
  EXPECT_EQ(got.stop_string, want.stop_string) << what;
  EXPECT_EQ(got.usage.completion_tokens, want.usage.completion_tokens) << what;
  ASSERT_EQ(got.logprobs.size(), want.logprobs.size()) << what;
  for (size_t i = 0; i < got.logprobs.size(); ++i) {
    EXPECT_EQ(got.logprobs[i].token, want.logprobs[i].token) << what;
    EXPECT_EQ(got.logprobs[i].logprob, want.logprobs[i].logprob) << what;
    EXPECT_EQ(got.logprobs[i].top, want.logprobs[i].top) << what;
  }
}

runtime::SamplingParams sampling(int i) {
  runtime::SamplingParams p;
  switch (i % 6) {
    case 0:
      p.temperature = 0;
      break;
    case 1:
      p.temperature = 0.8f;
      break;
    case 2:
      p.temperature = 1.0f;
      p.top_k = 8;
      p.top_p = 0.9f;
      break;
    case 3:
      p.temperature = 0.7f;
      p.min_p = 0.1f;
      p.num_logprobs = 2;
      break;
    case 4:
      p.temperature = 0;
      p.repetition_penalty = 1.3f;
      p.frequency_penalty = 0.4f;
      break;
    default:
      p.temperature = 1.2f;
      p.presence_penalty = 0.6f;
      break;
  }
  return p;
}

// Requests over the fake model's 64-token vocabulary, whose toy pieces spell stop strings ("st" + "op").
std::vector<Req> fake_workload(std::mt19937& rng, int n) {
  std::vector<Req> reqs;
  for (int i = 0; i < n; ++i) {
    Req r;
    r.prompt = test::tokens(rng, 1 + int32_t(rng() % 20), 16);  // small ids: repeats, for the n-gram proposer
    r.sampling = sampling(i);
    r.seed = 100 + uint64_t(i);
    r.max_tokens = 1 + int32_t(rng() % 40);
    r.decoder = i % 3 != 2;
    if (i % 4 == 1) r.stop_strings = {"stop", "bc"}, r.decoder = true;
    if (i % 5 == 2) r.stop_ids = {3, 7};
    if (i % 6 == 3) r.min_tokens = std::min(r.max_tokens, 5);
    r.include_stop_str = i % 8 == 1;
    r.ignore_eos = i % 7 == 0;
    r.priority = i % 9 == 4 ? -1 : 0;
    reqs.push_back(r);
  }
  return reqs;
}

std::vector<int32_t> with_output(const Req& r, const RequestEvent& e) {
  std::vector<int32_t> full = r.prompt;
  full.insert(full.end(), e.token_ids.begin(), e.token_ids.end());
  return full;
}

testing::FakeBackendOptions small_vocab_fake(int32_t full_pages, int32_t sliding_pages) {
  testing::FakeBackendOptions o = test::fake_options(full_pages, sliding_pages);
  o.vocab_size = 16;   // the toy pieces and frequent repeats
  o.eos_bonus = 1.0f;  // requests end by EOS too
  return o;
}

struct Outcome {
  std::vector<RequestEvent> events;
  EngineMetrics metrics;
};

// The workload through one engine: two arrivals per step, invariants after every step, every page back.
Outcome serve(const std::vector<Req>& reqs, const testing::FakeBackendOptions& fake, EngineConfig c,
              const std::vector<size_t>& abort_at_step = {}) {
  test::Harness h(fake, c);
  std::vector<std::shared_ptr<RequestStream>> streams;
  size_t next = 0, step = 0;
  while (next < reqs.size() || h.engine.num_live_requests() > 0) {
    for (int k = 0; k < 2 && next < reqs.size(); ++k) streams.push_back(h.engine.submit(reqs[next++].spec()));
    for (size_t i = 0; i < abort_at_step.size(); ++i)
      if (abort_at_step[i] == step && i < streams.size()) h.engine.abort(streams[i]->id());
    h.engine.step();
    h.engine.check_invariants();
    ++step;
  }
  h.run();
  Outcome out;
  for (auto& s : streams) out.events.push_back(s->wait_all());
  out.metrics = h.engine.metrics();
  return out;
}

TEST(Speculative, EveryDraftLengthGivesTheTokensOfPlainDecoding) {
  std::mt19937 rng(11);
  const std::vector<Req> reqs = fake_workload(rng, 48);
  // A pool small enough for preemptions, a token budget small enough to trim drafts, prefix caching on.
  const testing::FakeBackendOptions fake = small_vocab_fake(20, 40);
  EngineConfig plain;
  plain.max_num_seqs = 6;
  plain.max_num_batched_tokens = 24;
  plain.max_model_len = 64;
  const Outcome base = serve(reqs, fake, plain);
  std::vector<RequestEvent> alone;
  for (const Req& r : reqs) alone.push_back(test::run_alone(r, fake));
  for (size_t i = 0; i < reqs.size(); ++i)
    expect_same(base.events[i], alone[i], "plain, request " + std::to_string(i));
  EXPECT_GT(base.metrics.preemptions, 0);

  for (int32_t k = 1; k <= 5; ++k) {
    auto oracle = std::make_shared<OracleProposer>();
    for (size_t i = 0; i < reqs.size(); ++i) oracle->add(with_output(reqs[i], alone[i]));
    EngineConfig c = plain;
    c.speculative.num_speculative_tokens = k;
    c.proposer = oracle;
    const Outcome got = serve(reqs, fake, c);
    for (size_t i = 0; i < reqs.size(); ++i)
      expect_same(got.events[i], alone[i],
                  "oracle k=" + std::to_string(k) + ", request " + std::to_string(i));
    const EngineMetrics& m = got.metrics;
    EXPECT_GT(m.spec_accepted_tokens, 0) << k;
    EXPECT_LT(m.spec_accepted_tokens, m.spec_draft_tokens) << k;
    EXPECT_LE(m.spec_draft_tokens, m.spec_drafts * k) << k;
    EXPECT_LT(m.steps, base.metrics.steps) << k;  // fewer steps for the same tokens
    EXPECT_EQ(m.generation_tokens, base.metrics.generation_tokens) << k;
    EXPECT_GT(m.preemptions, 0) << k;
    std::printf(
        "oracle k=%d: %lld drafts, acceptance %.2f, mean accepted length %.2f, %lld steps (plain %lld)\n", k,
        static_cast<long long>(m.spec_drafts), m.spec_acceptance_rate(), m.spec_mean_accepted_length(),
        static_cast<long long>(m.steps), static_cast<long long>(base.metrics.steps));

    EngineConfig n = plain;
    n.speculative = {.method = "ngram",
                     .model = {},
                     .num_speculative_tokens = k,
                     .prompt_lookup_min = 1,
                     .prompt_lookup_max = 3};
    const Outcome ng = serve(reqs, fake, n);
    for (size_t i = 0; i < reqs.size(); ++i)
      expect_same(ng.events[i], alone[i], "ngram k=" + std::to_string(k) + ", request " + std::to_string(i));
    EXPECT_GT(ng.metrics.spec_draft_tokens, 0) << k;
    std::printf("ngram k=%d: %lld drafts, acceptance %.2f\n", k,
                static_cast<long long>(ng.metrics.spec_drafts), ng.metrics.spec_acceptance_rate());
  }
}

TEST(Speculative, AbortedAndPreemptedSequencesAreForgottenAndFreeTheirPages) {
  std::mt19937 rng(5);
  std::vector<Req> reqs = fake_workload(rng, 16);
  for (Req& r : reqs) r.max_tokens = 30, r.ignore_eos = true, r.stop_strings.clear(), r.stop_ids.clear();
  const testing::FakeBackendOptions fake = small_vocab_fake(24, 40);
  auto oracle = std::make_shared<OracleProposer>();
  std::vector<RequestEvent> alone;
  for (const Req& r : reqs) {
    alone.push_back(test::run_alone(r, fake));
    oracle->add(with_output(r, alone.back()));
  }
  EngineConfig c;
  c.max_num_seqs = 4;
  c.max_num_batched_tokens = 32;
  c.max_model_len = 64;
  c.speculative.num_speculative_tokens = 4;
  c.proposer = oracle;
  const Outcome got = serve(reqs, fake, c, /*abort_at_step=*/{6, 9, 15, 0, 0, 0, 30});
  int aborted = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    const RequestEvent& e = got.events[i];
    if (e.finish == FinishReason::kAbort) {
      ++aborted;
      // What was streamed before the abort is the start of the plain output.
      ASSERT_LE(e.token_ids.size(), alone[i].token_ids.size());
      EXPECT_TRUE(std::equal(e.token_ids.begin(), e.token_ids.end(), alone[i].token_ids.begin())) << i;
    } else {
      expect_same(e, alone[i], "request " + std::to_string(i));
    }
  }
  EXPECT_GT(aborted, 0);
  EXPECT_GT(got.metrics.preemptions, 0);
  EXPECT_GT(got.metrics.spec_accepted_tokens, 0);
  EXPECT_EQ(oracle->forgotten.size(), reqs.size()) << "every finish tells the proposer";
}

TEST(Speculative, NoDraftsForConstrainedOrUnreadyOrFinishingSequences) {
  // max_tokens 1: nothing to draft. The token budget of a single decode: no room for drafts.
  std::mt19937 rng(3);
  Req one;
  one.prompt = test::tokens(rng, 5, 16);
  one.max_tokens = 1;
  one.seed = 9;
  auto oracle = std::make_shared<OracleProposer>();
  EngineConfig c;
  c.speculative.num_speculative_tokens = 4;
  c.proposer = oracle;
  test::Harness h(small_vocab_fake(64, 64), c);
  auto s = h.engine.submit(one.spec());
  h.run();
  EXPECT_EQ(s->wait_all().token_ids.size(), 1u);
  EXPECT_EQ(oracle->proposals, 0);

  Req longer = one;
  longer.max_tokens = 12;
  longer.min_tokens = 6;  // stop ids are banned for the first 6: no drafts until then
  longer.ignore_eos = false;
  EngineConfig tight = c;
  tight.max_num_batched_tokens = 1;
  tight.max_num_seqs = 1;
  test::Harness t(small_vocab_fake(64, 64), tight);
  auto ts = t.engine.submit(longer.spec());
  t.run();
  expect_same(ts->wait_all(), test::run_alone(longer, small_vocab_fake(64, 64)), "budget 1");
  EXPECT_EQ(oracle->proposals, 0);
}

TEST(Speculative, ProposerThatOverreachesIsAnInternalError) {
  class Greedy final : public Proposer {
    void propose(std::span<const DraftRequest> requests) override {
      for (const DraftRequest& r : requests) r.draft->assign(size_t(r.max_tokens) + 1, 1);
    }
  };
  EngineConfig c;
  c.speculative.num_speculative_tokens = 2;
  c.proposer = std::make_shared<Greedy>();
  test::Harness h(small_vocab_fake(64, 64), c);
  Req r;
  r.prompt = {1, 2, 3};
  r.max_tokens = 8;
  r.ignore_eos = true;  // the fake model's EOS as the first token would end the request before any draft
  r.seed = 7;
  h.engine.submit(r.spec());
  h.engine.step();  // the prefill: no drafts yet
  EXPECT_THROW(h.engine.step(), InternalError);
}

TEST(Speculative, RefusedWhereTheBackendCannotVerify) {
  EngineConfig c;
  c.speculative = {.method = "ngram", .model = {}, .num_speculative_tokens = 20};
  EXPECT_THROW(test::Harness(small_vocab_fake(64, 64), c), Error);  // the fake verifies 16
  c.speculative = {.method = "eagle", .model = {}, .num_speculative_tokens = 2};
  EXPECT_THROW(test::Harness(small_vocab_fake(64, 64), c), Error);
  c.speculative = {.method = "eagle3", .model = "synthetic", .num_speculative_tokens = 2};
  try {  // the fake has no draft head
    test::Harness h(small_vocab_fake(64, 64), c);
    ADD_FAILURE() << "eagle3 accepted on a backend without a head";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no EAGLE-3 head"), std::string::npos) << e.what();
  }
  testing::FakeBackendOptions instant = small_vocab_fake(64, 64);
  instant.simulate = false;
  c.speculative = {.method = "ngram", .model = {}, .num_speculative_tokens = 2};
  EXPECT_THROW(test::Harness(instant, c), Error);
}

// ---- A draft model ----

std::shared_ptr<DraftModelProposer> fake_draft(uint64_t salt, int32_t full_pages = 256,
                                               int32_t sliding_pages = 256) {
  testing::FakeBackendOptions o = small_vocab_fake(full_pages, sliding_pages);
  o.salt = salt;
  o.check_sample_index = false;  // a draft draws at the same output index again after a rejection
  return std::make_shared<DraftModelProposer>(std::make_shared<testing::FakeBackend>(o), 1 << 20);
}

TEST(SpeculativeDraftModel, TheTargetItselfAsDraftIsAlwaysAcceptedSampledOrNot) {
  std::mt19937 rng(23);
  const std::vector<Req> reqs = fake_workload(rng, 36);
  const testing::FakeBackendOptions fake = small_vocab_fake(20, 40);
  EngineConfig plain;
  plain.max_num_seqs = 6;
  plain.max_num_batched_tokens = 24;
  plain.max_model_len = 64;
  std::vector<RequestEvent> alone;
  for (const Req& r : reqs) alone.push_back(test::run_alone(r, fake));
  for (int32_t k : {1, 3, 5}) {
    auto draft = fake_draft(fake.salt);
    EngineConfig c = plain;
    c.speculative.num_speculative_tokens = k;
    c.proposer = draft;
    const Outcome got = serve(reqs, fake, c);
    for (size_t i = 0; i < reqs.size(); ++i)
      expect_same(got.events[i], alone[i],
                  "same-model draft k=" + std::to_string(k) + ", request " + std::to_string(i));
    // Coupled draws: the same model with the same Philox draw proposes exactly what the target draws.
    EXPECT_GT(got.metrics.spec_draft_tokens, 0);
    EXPECT_EQ(got.metrics.spec_accepted_tokens, got.metrics.spec_draft_tokens) << k;
    EXPECT_EQ(draft->num_tracked(), 0u) << "every sequence forgotten at its end";
  }
}

TEST(SpeculativeDraftModel, AnotherModelAsDraftChangesNoOutputAndSurvivesAFullPool) {
  std::mt19937 rng(29);
  const std::vector<Req> reqs = fake_workload(rng, 36);
  const testing::FakeBackendOptions fake = small_vocab_fake(20, 40);
  EngineConfig plain;
  plain.max_num_seqs = 6;
  plain.max_num_batched_tokens = 24;
  plain.max_model_len = 64;
  std::vector<RequestEvent> alone;
  for (const Req& r : reqs) alone.push_back(test::run_alone(r, fake));
  // A different "model", then one whose KV pool holds a sequence or two at most.
  for (auto [salt, pages] : {std::pair<uint64_t, int32_t>{5, 256}, {0, 12}}) {
    auto draft = fake_draft(salt, pages, pages);
    EngineConfig c = plain;
    c.speculative.num_speculative_tokens = 4;
    c.proposer = draft;
    const Outcome got = serve(reqs, fake, c);
    for (size_t i = 0; i < reqs.size(); ++i)
      expect_same(got.events[i], alone[i], "salt " + std::to_string(salt) + ", request " + std::to_string(i));
    EXPECT_GT(got.metrics.spec_draft_tokens, 0);
    if (salt == fake.salt)
      EXPECT_EQ(got.metrics.spec_accepted_tokens, got.metrics.spec_draft_tokens);
    else
      EXPECT_LT(got.metrics.spec_accepted_tokens, got.metrics.spec_draft_tokens);
    EXPECT_EQ(draft->num_tracked(), 0u);
    std::printf("draft salt %llu, %d pages: %lld drafts, acceptance %.2f\n",
                static_cast<unsigned long long>(salt), pages, static_cast<long long>(got.metrics.spec_drafts),
                got.metrics.spec_acceptance_rate());
  }
}

// ---- The CPU backend: a real model's logits, verified over k + 1 query tokens ----

std::shared_ptr<runtime::Backend> cpu_backend(const std::string& model, int32_t full_pages,
                                              int32_t sliding_pages, const std::string& eagle3_head = "") {
  runtime::cpu::CpuBackendOptions o;
  o.page_size = 4;
  o.num_full_pages = full_pages;
  o.num_sliding_pages = sliding_pages;
  o.eagle3_head = eagle3_head;
  return runtime::cpu::CpuBackend::create(model, o);
}

std::vector<RequestEvent> run_cpu(const std::string& model, const std::vector<Req>& reqs, EngineConfig c,
                                  EngineMetrics* metrics = nullptr, const std::string& eagle3_head = "") {
  c.max_model_len = 128;
  Engine e(cpu_backend(model, 96, 64, eagle3_head), c);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const Req& r : reqs) streams.push_back(e.submit(r.spec()));
  while (e.step()) e.check_invariants();
  std::vector<RequestEvent> out;
  for (auto& s : streams) out.push_back(s->wait_all());
  EXPECT_EQ(e.metrics().kv_full_pages_used, 0);
  if (metrics) *metrics = e.metrics();
  return out;
}

void expect_cpu_speculation_exact(const std::string& model, const std::string& other_model, int32_t vocab,
                                  int n) {
  std::mt19937 rng(17);
  std::vector<Req> reqs;
  for (int i = 0; i < n; ++i) {
    Req r;
    // A repeated phrase in the prompt, something for prompt lookup to find.
    std::vector<int32_t> phrase = test::tokens(rng, 4, vocab);
    r.prompt = test::tokens(rng, 3 + int32_t(rng() % 6), vocab);
    for (int rep = 0; rep < 2; ++rep) r.prompt.insert(r.prompt.end(), phrase.begin(), phrase.end());
    r.sampling = sampling(i);
    r.seed = 7 + uint64_t(i);
    r.max_tokens = 12 + int32_t(rng() % 10);
    r.ignore_eos = true;
    reqs.push_back(r);
  }
  EngineConfig plain;
  plain.max_num_seqs = 4;
  const std::vector<RequestEvent> base = run_cpu(model, reqs, plain);
  auto oracle = std::make_shared<OracleProposer>();
  for (size_t i = 0; i < reqs.size(); ++i) oracle->add(with_output(reqs[i], base[i]));
  for (int32_t k : {1, 3, 5}) {
    EngineConfig c = plain;
    c.speculative.num_speculative_tokens = k;
    c.proposer = oracle;
    const std::vector<RequestEvent> got = run_cpu(model, reqs, c);
    for (size_t i = 0; i < reqs.size(); ++i)
      expect_same(got[i], base[i], model + " oracle k=" + std::to_string(k));
    c.proposer = nullptr;
    c.speculative = {.method = "ngram",
                     .model = {},
                     .num_speculative_tokens = k,
                     .prompt_lookup_min = 1,
                     .prompt_lookup_max = 4};
    const std::vector<RequestEvent> ng = run_cpu(model, reqs, c);
    for (size_t i = 0; i < reqs.size(); ++i)
      expect_same(ng[i], base[i], model + " ngram k=" + std::to_string(k));
    // An EAGLE-3 head next to the target (random weights: it proposes, verification keeps the target's).
    c.speculative = {.method = "eagle3", .model = "synthetic@3", .num_speculative_tokens = k};
    EngineMetrics m;
    const std::vector<RequestEvent> eagle = run_cpu(model, reqs, c, &m, "synthetic@3");
    for (size_t i = 0; i < reqs.size(); ++i)
      expect_same(eagle[i], base[i], model + " eagle3 k=" + std::to_string(k));
    EXPECT_GT(m.spec_draft_tokens, 0) << "eagle3 k=" << k;
  }
  // The model itself as draft (a second backend of it): accepted every time; another as draft: same outputs.
  for (const std::string& draft_model : {model, other_model}) {
    if (draft_model.empty()) continue;
    EngineConfig c = plain;
    c.speculative.num_speculative_tokens = 3;
    c.proposer = std::make_shared<DraftModelProposer>(cpu_backend(draft_model, 96, 64), 128);
    EngineMetrics m;
    const std::vector<RequestEvent> got = run_cpu(model, reqs, c, &m);
    for (size_t i = 0; i < reqs.size(); ++i) expect_same(got[i], base[i], model + " draft " + draft_model);
    EXPECT_GT(m.spec_draft_tokens, 0);
    if (draft_model == model)
      EXPECT_EQ(m.spec_accepted_tokens, m.spec_draft_tokens);
    else
      EXPECT_LT(m.spec_accepted_tokens, m.spec_draft_tokens);
    std::printf("%s, draft %s: acceptance %.2f, mean accepted length %.2f\n", model.c_str(),
                draft_model.c_str(), m.spec_acceptance_rate(), m.spec_mean_accepted_length());
  }
}

TEST(SpeculativeCpu, GoldenTinyCheckpointGreedyAndSeededOutputsUnchanged) {
  expect_cpu_speculation_exact(std::string(ORCHID_SOURCE_DIR) + "/tests/golden/tiny/checkpoint", "", 1000, 6);
}

TEST(SpeculativeCpu, SyntheticTinyGreedyAndSeededOutputsUnchanged) {
  expect_cpu_speculation_exact("synthetic:tiny", "synthetic:tiny@2", 5000, 3);
}

}  // namespace
}  // namespace orchid::engine
