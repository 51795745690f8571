// Reading the golden cases made by tools/golden/harmony_cases.py (extracted by CMake at configure time).
#pragma once

#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "harmony/json_text.h"

namespace orchid::harmony::testing {

inline std::vector<nlohmann::ordered_json> read_golden_jsonl(const std::string& name) {
  std::ifstream f(std::string(ORCHID_HARMONY_GOLDEN_DIR) + "/" + name);
  EXPECT_TRUE(f.good()) << "missing golden file " << name << " (re-run cmake to extract the archive)";
  std::vector<nlohmann::ordered_json> out;
  std::string line;
  // Parsed like openai-harmony's serde_json reads the same text (see parse_json).
  while (std::getline(f, line)) out.push_back(parse_json(line, name));
  return out;
}

}  // namespace orchid::harmony::testing
