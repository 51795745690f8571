// The scripted backend through the real engine: the rule is chosen from the prompt (latest match wins), the
// output is the script's tokenization, and it holds with chunked prefill and prefix-cache hits, where the
// backend sees only part of the prompt in the step that samples.
#include "server/testing/replay_backend.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "engine/engine.h"

namespace orchid::server::testing {
namespace {

struct Fixture : ::testing::Test {
  void SetUp() override {
    tok = tokenizer::Tokenizer::builtin();
    specials = tok->special_literals();
  }
  std::vector<int32_t> run(engine::Engine& e, const std::string& prompt, int32_t max_tokens = 64) {
    engine::RequestSpec spec;
    spec.prompt = tok->encode(prompt, specials);
    spec.max_tokens = max_tokens;
    spec.stop_token_ids = {200012};  // <|call|>; <|return|> is the model's EOS
    auto stream = e.submit(std::move(spec));
    e.run_until_idle();
    return stream->wait_all().token_ids;
  }
  std::shared_ptr<const tokenizer::Tokenizer> tok;
  std::unordered_set<std::string> specials;
};

TEST_F(Fixture, ReplaysTheRuleWhoseMatchComesLast) {
  const std::string call =
      "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary "
      "to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Paris\"}<|call|>";
  const std::string answer = "<|channel|>final<|message|>It is sunny in Paris.<|return|>";
  const std::string fallback = "<|channel|>final<|message|>Hello!<|return|>";
  ReplayOptions o;
  o.rules = {{"weather in Paris", tok->encode(call, specials)},
             {"functions.get_weather to=assistant", tok->encode(answer, specials)},
             {"", tok->encode(fallback, specials)}};
  o.kv.page_size = 4;
  o.prompt_log = ::testing::TempDir() + "replay_prompts.jsonl";
  std::remove(o.prompt_log.c_str());
  engine::EngineConfig c;
  c.max_num_batched_tokens = 8;  // prompts arrive in several chunks
  c.max_num_seqs = 4;
  engine::Engine e(std::make_shared<ReplayBackend>(o, tok), c);

  const std::string turn1 = "<|start|>user<|message|>What is the weather in Paris?<|end|><|start|>assistant";
  EXPECT_EQ(run(e, turn1), tok->encode(call, specials));
  const std::string turn2 = turn1 + call.substr(0, call.size() - 8) + "<|call|>" +
                            "<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>"
                            "{\"sunny\":true}<|end|><|start|>assistant";
  EXPECT_EQ(run(e, turn2), tok->encode(answer, specials));
  EXPECT_EQ(run(e, "<|start|>user<|message|>hi<|end|><|start|>assistant"), tok->encode(fallback, specials));
  // The same prompt again is mostly a prefix-cache hit: the backend sees only its tail, yet picks the rule.
  EXPECT_EQ(run(e, turn1), tok->encode(call, specials));
  EXPECT_GT(e.metrics().prefix_hit_tokens, 0);
  // max_tokens cuts the script short.
  const std::vector<int32_t> script = tok->encode(call, specials);
  EXPECT_EQ(run(e, turn1, 3), std::vector<int32_t>(script.begin(), script.begin() + 3));

  std::ifstream log(o.prompt_log);
  std::string line;
  std::vector<std::string> lines;
  while (std::getline(log, line)) lines.push_back(line);
  ASSERT_EQ(lines.size(), 5u);
  const auto ids = nlohmann::json::parse(lines[1])["prompt"].get<std::vector<int32_t>>();
  EXPECT_EQ(ids, tok->encode(turn2, specials));
}

TEST_F(Fixture, ReplayFilesAreChecked) {
  const std::string path = ::testing::TempDir() + "replay_bad.json";
  for (const char* text :
       {"{", "[]", R"({"rules": []})", R"({"rules": [{"match": "x"}]})", R"({"rules": [{"output": ""}]})"}) {
    std::ofstream(path) << text;
    EXPECT_THROW(load_replay_file(path, *tok), Error) << text;
  }
  EXPECT_THROW(load_replay_file(path + ".missing", *tok), Error);
  std::ofstream(path) << R"({"rules": [{"match": "a", "output": "<|channel|>final<|message|>x<|return|>"}],
                           "step_delay_ms": 3})";
  const ReplayOptions o = load_replay_file(path, *tok);
  EXPECT_EQ(o.step_delay_ms, 3);
  EXPECT_EQ(o.rules[0].output, tok->encode("<|channel|>final<|message|>x<|return|>", specials));
}

}  // namespace
}  // namespace orchid::server::testing
