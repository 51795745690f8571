// What structured outputs cost the decode loop: the engine over a fake backend that only sleeps for a
// model step (simulate=false) and samples within the masks, with o200k's vocabulary, with and without a JSON
// Schema on every request. Requests that finish are replaced at once, so the batch stays full and the
// constrained runs go through every state of the grammar (opening, keys, values, closing). Two step times:
// 0 (the mask work alone, fully exposed) and an H200's gpt-oss-20b decode step at that batch
// (bench/RESULTS.md: 2.7 ms at batch 1, 9.1 ms at batch 64), where the mask worker runs during the step. Run:
// build/cpu/bench/structured/structured_mask_bench [seconds per run, default 3]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/testing/fake_backend.h"
#include "structured/output_format.h"
#include "structured/turn_constraint.h"

namespace orchid {
namespace {

constexpr const char* kSchema = R"({"type":"object","properties":{
  "name":{"type":"string"},"age":{"type":"integer","minimum":0,"maximum":150},
  "email":{"type":"string","format":"email"},"tags":{"type":"array","items":{"type":"string"}},
  "address":{"type":"object","properties":{"street":{"type":"string"},"city":{"type":"string"},
    "zip":{"type":"string","pattern":"^[0-9]{5}$"}},"required":["street","city","zip"]},
  "role":{"enum":["admin","user","guest"]}},"required":["name","age","tags","address","role"]})";

struct Result {
  double tokens_per_s = 0;
};

Result run(int32_t batch, std::chrono::microseconds step_time, bool constrained, double seconds,
           const std::shared_ptr<structured::GrammarVocabulary>& vocab,
           const std::shared_ptr<const structured::TurnLayout>& layout) {
  engine::testing::FakeBackendOptions o;
  o.vocab_size = vocab->vocab_size();
  o.simulate = false;
  o.step_time = step_time;
  o.kv = {.page_size = 16, .num_full_pages = 16384, .num_sliding_pages = 16384, .sliding_window = 128};
  o.max_position = 1 << 20;
  auto backend = std::make_shared<engine::testing::FakeBackend>(o);
  engine::EngineConfig c;
  c.max_num_seqs = batch;
  c.seed = 1;
  engine::Engine e(backend, c);
  std::vector<std::shared_ptr<engine::RequestStream>> streams;
  auto submit = [&] {
    engine::RequestSpec s;
    s.prompt = std::vector<int32_t>(16, 1000);
    s.ignore_eos = true;
    s.stop_token_ids = {vocab->special("<|return|>")};  // the end of a constrained answer
    s.max_tokens = 256;
    if (constrained) s.constraint = std::make_unique<structured::TurnConstraint>(vocab, layout);
    return e.submit(std::move(s));
  };
  for (int32_t i = 0; i < batch; ++i) streams.push_back(submit());
  for (int i = 0; i < 3; ++i) e.step();  // prefill and warm-up
  const int64_t tokens0 = e.metrics().generation_tokens;
  const auto t0 = std::chrono::steady_clock::now();
  double elapsed = 0;
  while (elapsed < seconds) {
    e.step();
    for (auto& s : streams) {
      while (auto ev = s->poll()) {
        if (ev->finished()) s = submit();
      }
    }
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  const int64_t tokens = e.metrics().generation_tokens - tokens0;
  e.stop();
  return {double(tokens) / elapsed};
}

}  // namespace
}  // namespace orchid

int main(int argc, char** argv) {
  using namespace orchid;
  const double seconds = argc > 1 ? std::atof(argv[1]) : 3.0;
  auto vocab = structured::GrammarVocabulary::of(tokenizer::Tokenizer::builtin());
  auto layout = std::make_shared<structured::TurnLayout>();
  layout->branches.push_back(
      {{},
       structured::compile({structured::OutputFormat::Kind::kJsonSchema, kSchema, {}}, *vocab),
       vocab->special("<|return|>")});
  std::printf(
      "| batch | step (fake model) | tok/s without schema | tok/s with schema | ratio | mask us/token |\n");
  std::printf("|---|---|---|---|---|---|\n");
  for (int32_t batch : {1, 64}) {
    const std::chrono::microseconds h200(batch == 1 ? 2700 : 9100);
    for (auto step : {std::chrono::microseconds(0), h200}) {
      const Result plain = run(batch, step, false, seconds, vocab, layout);
      const Result masked = run(batch, step, true, seconds, vocab, layout);
      // From the exposed runs: the extra time per generated token.
      const double us =
          step.count() == 0 ? (1e6 / masked.tokens_per_s - 1e6 / plain.tokens_per_s) * batch : 0.0;
      std::printf("| %d | %.1f ms | %.0f | %.0f | %.3f | %s |\n", batch, double(step.count()) / 1000.0,
                  plain.tokens_per_s, masked.tokens_per_s, masked.tokens_per_s / plain.tokens_per_s,
                  step.count() == 0 ? std::to_string(int(us)).c_str() : "-");
    }
  }
  return 0;
}
