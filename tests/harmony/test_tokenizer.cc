// A decode-only o200k_harmony vocabulary read from o200k_base.tiktoken, for the parser tests until the
// project's tokenizer is available in this build.
#include "test_tokenizer.h"

#include <fmt/format.h>

#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

namespace orchid::harmony::testing {
namespace {

std::string base64_decode(const std::string& in) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::string out;
  int bits = 0, acc = 0;
  for (char c : in) {
    const int v = value(c);
    if (v < 0) continue;
    acc = (acc << 6) | v;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  return out;
}

class DecodeOnlyTokenizer : public tokenizer::Tokenizer {
 public:
  explicit DecodeOnlyTokenizer(const std::string& path) {
    std::ifstream f(path);
    if (!f) throw std::runtime_error("cannot open " + path);
    std::string b64;
    int rank = 0;
    while (f >> b64 >> rank) {
      if (rank >= static_cast<int>(bytes_.size())) bytes_.resize(rank + 1);
      bytes_[rank] = base64_decode(b64);
    }
    bytes_.resize(kVocab);
    const std::unordered_map<int, std::string> named = {
        {199998, "<|startoftext|>"}, {199999, "<|endoftext|>"}, {200002, "<|return|>"},
        {200003, "<|constrain|>"},   {200005, "<|channel|>"},   {200006, "<|start|>"},
        {200007, "<|end|>"},         {200008, "<|message|>"},   {200012, "<|call|>"}};
    for (int id = kFirstSpecial; id < kVocab; ++id) {
      auto it = named.find(id);
      bytes_[id] = it != named.end() ? it->second : fmt::format("<|reserved_{}|>", id);
    }
  }
  std::vector<int32_t> encode_ordinary(std::string_view) const override {
    throw std::logic_error("decode-only test vocabulary");
  }
  std::vector<int32_t> encode(std::string_view, const std::unordered_set<std::string>&) const override {
    throw std::logic_error("decode-only test vocabulary");
  }
  std::string decode(std::span<const int32_t> ids) const override {
    std::string out;
    for (int32_t id : ids) {
      if (!decode_append(id, &out)) throw std::runtime_error("unknown id");
    }
    return out;
  }
  bool decode_append(int32_t id, std::string* out) const override {
    if (id < 0 || id >= kVocab) return false;
    out->append(bytes_[id]);
    return true;
  }
  std::optional<int32_t> special_id(std::string_view literal) const override {
    for (int id = kFirstSpecial; id < kVocab; ++id) {
      if (bytes_[id] == literal) return id;
    }
    return std::nullopt;
  }
  bool is_special(int32_t id) const override { return id >= kFirstSpecial && id < kVocab; }
  int32_t vocab_size() const override { return kVocab; }

 private:
  static constexpr int kFirstSpecial = 199998;
  static constexpr int kVocab = 201088;
  std::vector<std::string> bytes_;
};

}  // namespace

std::shared_ptr<const tokenizer::Tokenizer> test_tokenizer() {
  static const auto tok = [] {
    if (const char* base = std::getenv("TIKTOKEN_ENCODINGS_BASE"))
      return std::make_shared<DecodeOnlyTokenizer>(std::string(base) + "/o200k_base.tiktoken");
    for (const char* rel : {"/assets/tokenizer/o200k_base.tiktoken",
                            "/../shared/fixtures/gpt-oss-tokenizer/o200k_base.tiktoken"}) {
      const std::string path = std::string(ORCHID_SOURCE_DIR) + rel;
      if (std::ifstream(path)) return std::make_shared<DecodeOnlyTokenizer>(path);
    }
    throw std::runtime_error("o200k_base.tiktoken not found");
  }();
  return tok;
}

bool test_tokenizer_encodes() {
  return false;
}

}  // namespace orchid::harmony::testing
