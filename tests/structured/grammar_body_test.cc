// The grammar part of a constraint under a random-weight sampler: whatever is drawn within the masks, the
// value closes before the budget ends and is what the grammar describes (nlohmann parses it; the Python
// tests validate against the schemas with jsonschema).
#include "structured/grammar_body.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "structured/output_format.h"
#include "structured/turn_constraint.h"
#include "test_sampling.h"

namespace orchid::structured {
namespace {

std::shared_ptr<GrammarVocabulary> vocab() {
  return GrammarVocabulary::of(tokenizer::Tokenizer::builtin());
}

std::shared_ptr<const TurnLayout> raw_layout(const OutputFormat& f, int32_t end) {
  auto l = std::make_shared<TurnLayout>();
  l->branches.push_back({{}, compile(f, *vocab()), end});
  return l;
}

const char* kSchemas[] = {
    R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer","minimum":0,"maximum":200}},"required":["name","age"]})",
    R"({"type":"object","properties":{"a":{"type":"object","properties":{"street_address":{"type":"string"},"city":{"type":"string"}},"required":["street_address","city"]},"tags":{"type":"array","items":{"type":"string"},"minItems":1}},"required":["a","tags"]})",
    R"({"type":"object","properties":{"when":{"type":"string","format":"date-time"},"mail":{"type":"string","format":"email"},"id":{"type":"string","format":"uuid"}},"required":["when","mail","id"]})",
    R"({"$defs":{"n":{"type":"object","properties":{"v":{"anyOf":[{"type":"integer","minimum":-999,"maximum":999},{"type":"null"}]},"k":{"type":"array","items":{"$ref":"#/$defs/n"}}},"required":["v"]}},"$ref":"#/$defs/n"})",
};

TEST(GrammarBody, RandomSamplingAlwaysClosesWithinTheBudget) {
  auto v = vocab();
  const int32_t end = v->special("<|return|>");
  for (const char* schema : kSchemas) {
    const auto layout = raw_layout({OutputFormat::Kind::kJsonSchema, schema, {}}, end);
    for (int32_t budget : {90, 140, 200}) {
      for (uint32_t seed = 0; seed < 3; ++seed) {
        TurnConstraint c(v, layout);
        std::vector<int32_t> ids = testing::run_random(c, v->mask_words(), budget, end, seed);
        ASSERT_FALSE(ids.empty());
        EXPECT_EQ(ids.back(), end) << schema << " budget " << budget << " seed " << seed;
        ids.pop_back();
        // (Integers are bounded in these schemas: nlohmann refuses numbers beyond a double's range.)
        const std::string text = v->tokenizer().decode(ids);
        EXPECT_TRUE(nlohmann::json::accept(text)) << text;
      }
    }
  }
}

TEST(GrammarBody, ClosingWalkShortensByOneEachStep) {
  auto v = vocab();
  const int32_t end = v->special("<|return|>");
  GrammarBody body(v, compile({OutputFormat::Kind::kJsonSchema, kSchemas[1], {}}, *v), end);
  std::vector<uint32_t> mask(size_t(v->mask_words()));
  // Opens the value, then follows the walk: its length must drop by exactly one per token taken.
  int32_t len = body.closing_length(1000);
  ASSERT_LE(len, 1000);
  int32_t remaining = len;  // exactly what the walk needs: every mask has one token
  while (true) {
    body.fill_mask(mask, remaining);
    const auto ids = testing::allowed_ids(mask);
    ASSERT_EQ(ids.size(), 1u);
    ASSERT_TRUE(body.accept(ids[0]));
    if (ids[0] == end) break;
    --remaining;
    EXPECT_EQ(body.closing_length(1000), --len);
  }
  EXPECT_TRUE(body.finished());
}

TEST(GrammarBody, LooseBudgetLeavesTheGrammarsWholeMask) {
  auto v = vocab();
  const int32_t end = v->special("<|return|>");
  GrammarBody body(v, compile({OutputFormat::Kind::kJsonObject, {}, {}}, *v), end);
  std::vector<uint32_t> mask(size_t(v->mask_words()));
  body.fill_mask(mask, 1000);
  EXPECT_FALSE(body.closing());
  const auto ids = testing::allowed_ids(mask);
  EXPECT_GT(ids.size(), 1u);  // '{', '{"', ...
  for (int32_t id : ids) EXPECT_EQ(v->tokenizer().decode(std::vector<int32_t>{id})[0], '{');
  // Within the last tokens of the budget the mask narrows to the closing walk's one token.
  body.fill_mask(mask, 3);
  EXPECT_TRUE(body.closing());
  EXPECT_EQ(testing::allowed_ids(mask).size(), 1u);
}

TEST(OutputFormat, BadInputsNameTheReason) {
  auto v = vocab();
  EXPECT_THROW(compile({OutputFormat::Kind::kRegex, "([a-z", {}}, *v), Error);
  EXPECT_THROW(compile({OutputFormat::Kind::kGrammar, "root ::= (", {}}, *v), Error);
  EXPECT_THROW(compile({OutputFormat::Kind::kJsonSchema, "{\"type\": 5}", {}}, *v), Error);
  EXPECT_THROW(compile({OutputFormat::Kind::kChoice, {}, {}}, *v), Error);
}

}  // namespace
}  // namespace orchid::structured
