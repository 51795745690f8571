#include "test_util.h"

#include <gtest/gtest.h>

#include <string_view>

namespace orchid::engine::test {

std::string ToyDecoder::piece(int32_t id) {
  static const char* const kPieces[] = {"<eos>", "a",    "b",   "c", "st",  "op", "s",        "top",
                                        "\xC3",  "\xA9", "xbx", " ", "sto", "p",  "\xE2\x82", "\xAC"};
  if (id >= 0 && id < int32_t(std::size(kPieces))) return kPieces[id];
  std::string out = "<";
  out += std::to_string(id);
  out += '>';
  return out;
}

namespace {
// Length of the longest prefix of s made of complete UTF-8 characters.
size_t complete_utf8(std::string_view s) {
  size_t i = 0, ok = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    if (i + len > s.size()) break;
    i += len;
    ok = i;
  }
  return ok;
}
}  // namespace

std::string ToyDecoder::append(int32_t id) {
  pending_ += piece(id);
  const size_t n = complete_utf8(pending_);
  std::string out = pending_.substr(0, n);
  pending_.erase(0, n);
  return out;
}

std::string ToyDecoder::flush() {
  std::string out = pending_.empty() ? "" : "\xEF\xBF\xBD";  // U+FFFD for a cut character
  pending_.clear();
  return out;
}

std::string toy_text(const std::vector<int32_t>& ids) {
  ToyDecoder d;
  std::string out;
  for (int32_t id : ids) out += d.append(id);
  return out + d.flush();
}

RequestSpec Req::spec() const {
  RequestSpec s;
  s.prompt = prompt;
  s.sampling = sampling;
  s.seed = seed;
  s.stop_token_ids = stop_ids;
  s.stop_strings = stop_strings;
  s.include_stop_str_in_output = include_stop_str;
  s.ignore_eos = ignore_eos;
  s.max_tokens = max_tokens;
  s.min_tokens = min_tokens;
  s.priority = priority;
  if (decoder) s.decoder = std::make_unique<ToyDecoder>();
  return s;
}

testing::FakeBackendOptions fake_options(int32_t full_pages, int32_t sliding_pages, int32_t max_len) {
  testing::FakeBackendOptions o;
  o.kv.num_full_pages = full_pages;
  o.kv.num_sliding_pages = sliding_pages;
  o.max_position = max_len;
  return o;
}

std::vector<int32_t> tokens(std::mt19937& rng, int32_t n, int32_t vocab) {
  std::vector<int32_t> t;
  for (int32_t i = 0; i < n; ++i) t.push_back(1 + int32_t(rng() % uint32_t(vocab - 1)));
  return t;
}

Harness::Harness(testing::FakeBackendOptions o, EngineConfig c)
    : options(o), fake(std::make_shared<testing::FakeBackend>(o)), engine(fake, c) {}

void Harness::run() {
  while (engine.step()) engine.check_invariants();
  engine.check_invariants();
  EXPECT_EQ(engine.num_live_requests(), 0u);
  const auto m = engine.metrics();
  EXPECT_EQ(m.kv_full_pages_used, 0);
  EXPECT_EQ(m.kv_sliding_pages_used, 0);
}

RequestEvent run_alone(const Req& req, const testing::FakeBackendOptions& fake,
                       int32_t max_num_batched_tokens) {
  testing::FakeBackendOptions big = fake;
  big.kv.num_full_pages = std::max(big.kv.num_full_pages, 4096);
  big.kv.num_sliding_pages = std::max(big.kv.num_sliding_pages, 4096);
  EngineConfig config;
  config.enable_prefix_caching = false;
  config.max_num_batched_tokens = max_num_batched_tokens;
  config.max_num_seqs = 1;
  Engine engine(std::make_shared<testing::FakeBackend>(big), config);
  auto stream = engine.submit(req.spec());
  engine.run_until_idle();
  return stream->wait_all();
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

}  // namespace orchid::engine::test
