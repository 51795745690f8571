// Paths and data shared by the tokenizer tests.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace orchid::tokenizer::testing {

// The gpt-oss tokenizer fixtures (shared/ beside the repository), or "" when absent.
inline std::string fixture_dir() {
  if (const char* env = std::getenv("ORCHID_FIXTURES_DIR")) return env;
  for (const char* rel :
       {"/../shared/fixtures/gpt-oss-tokenizer", "/../../shared/fixtures/gpt-oss-tokenizer"}) {
    std::string p = std::string(ORCHID_SOURCE_DIR) + rel;
    if (std::filesystem::exists(p + "/tokenizer.json")) return p;
  }
  return "";
}

// The documents of tests/data/tokenizer_corpus.jsonl.
inline const std::vector<std::string>& corpus() {
  static const std::vector<std::string> docs = [] {
    std::ifstream f(ORCHID_SOURCE_DIR "/tests/data/tokenizer_corpus.jsonl", std::ios::binary);
    std::vector<std::string> out;
    for (std::string line; std::getline(f, line);) {
      if (!line.empty()) out.push_back(nlohmann::json::parse(line).get<std::string>());
    }
    return out;
  }();
  return docs;
}

}  // namespace orchid::tokenizer::testing
