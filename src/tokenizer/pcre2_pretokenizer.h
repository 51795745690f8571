// The o200k regex run by PCRE2 (UTF + UCP, JIT when available): the reference the hand-written scanner
// (pretokenizer.h) is checked against in tests, fuzzing and benchmarks. PCRE2's Unicode tables may be older
// than the oracle's, so comparisons are only meaningful for code points where char_class() agrees with
// tokenizer::char_class().
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace orchid::tokenizer {

class Pcre2Pretokenizer {
 public:
  Pcre2Pretokenizer();
  ~Pcre2Pretokenizer();
  Pcre2Pretokenizer(const Pcre2Pretokenizer&) = delete;
  Pcre2Pretokenizer& operator=(const Pcre2Pretokenizer&) = delete;

  // The regex's matches over valid UTF-8 `text`, in order.
  std::vector<std::string_view> pieces(std::string_view text) const;
  // CharClass bits of a scalar value according to PCRE2's own tables.
  uint8_t char_class(uint32_t cp) const;
  std::string unicode_version() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace orchid::tokenizer
