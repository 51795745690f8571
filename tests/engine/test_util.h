// Shared helpers for engine tests: copyable request descriptions, a toy detokenizer, and "run it alone".
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/testing/fake_backend.h"

namespace orchid::engine::test {

// A toy vocabulary for stop strings: id -> bytes. Ids past the table decode to "<id>".
class ToyDecoder : public TextDecoder {
 public:
  static std::string piece(int32_t id);
  std::string append(int32_t id) override;
  std::string flush() override;

 private:
  std::string pending_;  // bytes of an incomplete UTF-8 character
};

// The decoded text of ids, all at once (the oracle for incremental decoding).
std::string toy_text(const std::vector<int32_t>& ids);

struct Req {
  std::vector<int32_t> prompt;
  runtime::SamplingParams sampling;
  std::optional<uint64_t> seed;
  std::vector<int32_t> stop_ids;
  std::vector<std::string> stop_strings;
  bool include_stop_str = false;
  bool ignore_eos = false;
  bool decoder = false;
  int32_t max_tokens = 16;
  int32_t min_tokens = 0;
  int32_t priority = 0;

  RequestSpec spec() const;
};

// Fake backend options: page 4, window 8, vocabulary 64.
testing::FakeBackendOptions fake_options(int32_t full_pages = 512, int32_t sliding_pages = 128,
                                         int32_t max_len = 512);

// `n` random ids in [1, vocab) (0 is the fake model's EOS).
std::vector<int32_t> tokens(std::mt19937& rng, int32_t n, int32_t vocab = 64);

// An engine over a fake backend, stepped on the test's thread; run() checks the invariants after every step
// and that nothing is left at the end.
struct Harness {
  Harness(testing::FakeBackendOptions o, EngineConfig c);
  void run();

  testing::FakeBackendOptions options;
  std::shared_ptr<testing::FakeBackend> fake;
  Engine engine;
};

// Request i's outcome equals `want`: tokens, finish reason, every logprob and top list (gtest expectations).
void expect_same(const RequestEvent& got, const RequestEvent& want, size_t i);

// Runs `req` alone on a fresh engine over a fresh fake backend (large pool, no prefix cache).
RequestEvent run_alone(const Req& req, const testing::FakeBackendOptions& fake,
                       int32_t max_num_batched_tokens = 8192);

}  // namespace orchid::engine::test
