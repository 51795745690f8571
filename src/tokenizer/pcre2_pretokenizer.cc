#include "tokenizer/pcre2_pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "core/error.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/unicode_class.h"
#include "tokenizer/utf8.h"

namespace orchid::tokenizer {
namespace {

pcre2_code* compile(std::string_view pattern, uint32_t extra_options) {
  int err = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* re = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                 PCRE2_UTF | PCRE2_UCP | extra_options, &err, &offset, nullptr);
  ORCHID_CHECK(re != nullptr, "PCRE2 rejected '{}' at offset {} (error {})", pattern, offset, err);
  pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);  // falls back to the interpreter where JIT is unavailable
  return re;
}

}  // namespace

struct Pcre2Pretokenizer::Impl {
  pcre2_code* split = nullptr;
  struct ClassPattern {
    pcre2_code* re;
    uint8_t bit;
  };
  std::vector<ClassPattern> classes;
  ~Impl() {
    pcre2_code_free(split);
    for (auto& c : classes) pcre2_code_free(c.re);
  }
};

Pcre2Pretokenizer::Pcre2Pretokenizer() : impl_(std::make_unique<Impl>()) {
  impl_->split = compile(kO200kPattern, 0);
  const std::pair<std::string_view, uint8_t> classes[] = {
      {"\\p{L}", kLetter},
      {"\\p{N}", kNumber},
      {"[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]", kUpperish},
      {"[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]", kLowerish},
      {"\\s", kSpace},
      {"[\\r\\n]", kNewline},
  };
  for (const auto& [pattern, bit] : classes)
    impl_->classes.push_back({compile(pattern, PCRE2_ANCHORED), bit});
}

Pcre2Pretokenizer::~Pcre2Pretokenizer() = default;

std::vector<std::string_view> Pcre2Pretokenizer::pieces(std::string_view text) const {
  std::vector<std::string_view> out;
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(impl_->split, nullptr);
  auto* s = reinterpret_cast<PCRE2_SPTR>(text.data());
  for (size_t p = 0; p < text.size();) {
    int rc = pcre2_match(impl_->split, s, text.size(), p, 0, md, nullptr);
    if (rc < 0) break;
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    out.push_back(text.substr(ov[0], ov[1] - ov[0]));
    p = ov[1] > ov[0] ? ov[1] : ov[0] + 1;
  }
  pcre2_match_data_free(md);
  return out;
}

uint8_t Pcre2Pretokenizer::char_class(uint32_t cp) const {
  std::string ch;
  append_utf8(cp, &ch);
  uint8_t bits = 0;
  for (const auto& c : impl_->classes) {
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(c.re, nullptr);
    if (pcre2_match(c.re, reinterpret_cast<PCRE2_SPTR>(ch.data()), ch.size(), 0, 0, md, nullptr) > 0)
      bits |= c.bit;
    pcre2_match_data_free(md);
  }
  return bits;
}

std::string Pcre2Pretokenizer::unicode_version() const {
  char buf[32] = {};
  pcre2_config(PCRE2_CONFIG_UNICODE_VERSION, buf);
  return buf;
}

}  // namespace orchid::tokenizer
