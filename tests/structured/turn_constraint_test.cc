// The Harmony turn layout under a random-weight sampler: the analysis message stays within its budget, the
// headers come out as the renderer writes them, the branch chosen is one the request allows, and the turn
// ends with its end token within max_tokens.
#include "structured/turn_constraint.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "structured/output_format.h"
#include "test_sampling.h"

namespace orchid::structured {
namespace {

struct Harmony {
  std::shared_ptr<GrammarVocabulary> v = GrammarVocabulary::of(tokenizer::Tokenizer::builtin());
  const tokenizer::Tokenizer& tok = v->tokenizer();
  std::vector<int32_t> ids(const std::string& s) const {
    return tok.encode(s, {"<|channel|>", "<|constrain|>", "<|message|>", "<|start|>", "<|end|>"});
  }
  std::shared_ptr<TurnLayout> layout(int32_t budget) const {
    auto l = std::make_shared<TurnLayout>();
    l->analysis = true;
    l->analysis_header = ids("<|channel|>analysis<|message|>");
    l->analysis_end = v->special("<|end|>");
    l->analysis_reopen = ids("<|start|>assistant<|channel|>");
    l->reasoning_budget = budget;
    return l;
  }
};

const char* kSchema =
    R"({"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer","minimum":1,"maximum":7}},"required":["city","days"]})";

TEST(TurnConstraint, FinalAnswerFollowsTheFormatAfterBoundedAnalysis) {
  Harmony h;
  const int32_t ret = h.v->special("<|return|>");
  auto layout = h.layout(20);
  layout->branches.push_back(
      {h.ids("final<|message|>"), compile({OutputFormat::Kind::kJsonSchema, kSchema, {}}, *h.v), ret});
  for (uint32_t seed = 0; seed < 4; ++seed) {
    TurnConstraint c(h.v, layout);
    const std::vector<int32_t> out = testing::run_random(c, h.v->mask_words(), 200, ret, seed);
    ASSERT_EQ(out.back(), ret);
    const std::string text = h.tok.decode(out);
    const std::string head = "<|channel|>analysis<|message|>";
    const std::string mid = "<|end|><|start|>assistant<|channel|>final<|message|>";
    ASSERT_EQ(text.rfind(head, 0), 0u) << text;
    const size_t m = text.find(mid);
    ASSERT_NE(m, std::string::npos) << text;
    const size_t analysis_tokens =
        size_t(std::find(out.begin(), out.end(), layout->analysis_end) - out.begin()) -
        layout->analysis_header.size();
    EXPECT_LE(analysis_tokens, 20u);
    const std::string answer =
        text.substr(m + mid.size(), text.size() - m - mid.size() - std::string("<|return|>").size());
    const auto j = nlohmann::json::parse(answer);
    EXPECT_TRUE(j.at("city").is_string());
    EXPECT_GE(j.at("days").get<int>(), 1);
    EXPECT_LE(j.at("days").get<int>(), 7);
  }
}

TEST(TurnConstraint, ChoosesAmongTheRequestsBranchesOnly) {
  Harmony h;
  const int32_t ret = h.v->special("<|return|>"), call = h.v->special("<|call|>");
  auto layout = h.layout(4);
  const auto args = compile({OutputFormat::Kind::kJsonSchema, kSchema, {}}, *h.v);
  layout->branches.push_back(
      {h.ids("commentary to=functions.get_weather <|constrain|>json<|message|>"), args, call});
  layout->branches.push_back(
      {h.ids("commentary to=functions.get_time <|constrain|>json<|message|>"), args, call});
  int calls = 0;
  for (uint32_t seed = 0; seed < 6; ++seed) {
    TurnConstraint c(h.v, layout);
    const std::vector<int32_t> out = testing::run_random(c, h.v->mask_words(), 120, call, seed);
    ASSERT_EQ(out.back(), call);
    const std::string text = h.tok.decode(out);
    EXPECT_TRUE(text.find("to=functions.get_weather <|constrain|>json<|message|>{") != std::string::npos ||
                text.find("to=functions.get_time <|constrain|>json<|message|>{") != std::string::npos)
        << text;
    EXPECT_EQ(text.find("<|return|>"), std::string::npos);
    ++calls;
  }
  EXPECT_EQ(calls, 6);
  (void)ret;
}

TEST(TurnConstraint, FreeFinalTextEndsAtTheBudget) {
  Harmony h;
  const int32_t ret = h.v->special("<|return|>");
  auto layout = h.layout(3);
  layout->branches.push_back({h.ids("final<|message|>"), std::nullopt, ret});
  TurnConstraint c(h.v, layout);
  const std::vector<int32_t> out = testing::run_random(c, h.v->mask_words(), 40, ret, 1);
  EXPECT_EQ(out.size(), 40u);
  EXPECT_EQ(out.back(), ret);
}

TEST(TurnConstraint, RefusesATokenOutsideItsMask) {
  Harmony h;
  auto layout = h.layout(8);
  layout->branches.push_back({h.ids("final<|message|>"), std::nullopt, h.v->special("<|return|>")});
  TurnConstraint c(h.v, layout);
  EXPECT_FALSE(c.accept(h.v->special("<|return|>")));  // the turn must open with <|channel|>
}

}  // namespace
}  // namespace orchid::structured
