// Random bytes -> pre-tokenizer, encode_ordinary, encode with all specials allowed.
// Invariants: pieces tile the input; ordinary ids are never special; decode(encode(x)) == x for any bytes
// (valid UTF-8 or not); specials are recognised only where their literal is; and for valid UTF-8 whose code
// points PCRE2 classifies like orchid, the scanner splits exactly as PCRE2 running the regex does.
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "fuzz_check.h"
#include "tokenizer/pcre2_pretokenizer.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode_class.h"
#include "tokenizer/utf8.h"

using namespace orchid::tokenizer;

namespace {

// True if PCRE2's tables agree with orchid's for every code point of valid UTF-8 `text`.
bool pcre2_classes_agree(const Pcre2Pretokenizer& pcre2, std::string_view text) {
  static std::vector<uint8_t> known(kCodePointLimit, 0);  // 0 unknown, 1 agree, 2 differ
  auto* s = reinterpret_cast<const unsigned char*>(text.data());
  for (size_t i = 0; i < text.size();) {
    const Utf8Step st = read_utf8(s + i, text.size() - i);
    i += st.len;
    uint8_t& k = known[st.cp];
    if (k == 0) k = pcre2.char_class(st.cp) == char_class(st.cp) ? 1 : 2;
    if (k == 2) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const auto tok = Tokenizer::builtin();
  static const Pcre2Pretokenizer pcre2;
  // Every special literal under its decoded name (an alias such as <|reserved_200018|> decodes to another
  // name, so it would break the round trip).
  static const std::unordered_set<std::string> all_specials = [] {
    std::unordered_set<std::string> out;
    for (const std::string& literal : tok->special_literals()) {
      std::string name;
      if (tok->decode_append(*tok->special_id(literal), &name) && name == literal) out.insert(literal);
    }
    return out;
  }();
  const std::string_view text(reinterpret_cast<const char*>(data), size);

  const std::vector<std::string_view> pieces = o200k_pieces(text);
  std::string joined;
  for (std::string_view p : pieces) {
    FUZZ_CHECK(!p.empty());
    joined.append(p);
  }
  FUZZ_CHECK(joined == text);
  if (is_valid_utf8(text) && pcre2_classes_agree(pcre2, text)) FUZZ_CHECK(pieces == pcre2.pieces(text));

  const std::vector<int32_t> ids = tok->encode_ordinary(text);
  for (int32_t id : ids) FUZZ_CHECK(id >= 0 && !tok->is_special(id));
  FUZZ_CHECK(tok->decode(ids) == text);

  const std::vector<int32_t> with_specials = tok->encode(text, all_specials);
  FUZZ_CHECK(tok->decode(with_specials) == text);
  for (int32_t id : with_specials) {
    if (!tok->is_special(id)) continue;
    std::string literal;
    FUZZ_CHECK(tok->decode_append(id, &literal));
    FUZZ_CHECK(text.find(literal) != std::string_view::npos);
  }
  return 0;
}
