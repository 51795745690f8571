// UTF-8 validation and lossy decoding against Python's decoder (golden utf8_cases.jsonl), which follows the
// same maximal-subpart rule as the Rust functions openai-harmony uses.
#include "harmony/utf8.h"

#include <gtest/gtest.h>

#include "golden_files.h"

namespace orchid::harmony {
namespace {

std::string from_hex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2)
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

TEST(HarmonyUtf8, MatchesPythonDecoder) {
  const auto cases = testing::read_golden_jsonl("utf8_cases.jsonl");
  ASSERT_GE(cases.size(), 1000u);
  size_t invalid = 0, truncated = 0;
  for (const auto& c : cases) {
    const std::string bytes = from_hex(c.at("hex"));
    const Utf8Status st = check_utf8(bytes);
    EXPECT_EQ(st.valid, c.at("valid").get<bool>()) << c.at("hex");
    EXPECT_EQ(st.valid_up_to, c.at("valid_up_to").get<size_t>()) << c.at("hex");
    if (c.at("error_len").is_null()) {
      EXPECT_FALSE(st.error_len.has_value()) << c.at("hex");
      truncated += !st.valid;
    } else {
      EXPECT_EQ(st.error_len, c.at("error_len").get<size_t>()) << c.at("hex");
    }
    invalid += !st.valid;
    EXPECT_EQ(utf8_lossy(bytes), c.at("lossy").get<std::string>()) << c.at("hex");
  }
  EXPECT_GT(invalid, 100u);
  EXPECT_GT(truncated, 20u);
}

}  // namespace
}  // namespace orchid::harmony
