// o200k's pre-tokenizer: splits text into the pieces that BPE then encodes one by one. It reproduces the
// leftmost-first, backtracking semantics of tiktoken's regex (spelled out in pretokenizer.cc) with a
// hand-written scanner, which is exact for the Unicode version of the oracle and several times faster than a
// regex engine (bench/tokenizer measures both).
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

namespace orchid::tokenizer {

// The regex, for reference and for the PCRE2 cross-checks in tests and benchmarks.
inline constexpr std::string_view kO200kPattern =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    "|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*"
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    "|\\p{N}{1,3}"
    "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*"
    "|\\s*[\\r\\n]+"
    "|\\s+(?!\\S)"
    "|\\s+";

// End (exclusive) of the piece that starts at `pos` (< text.size()). Every position starts a piece, so pieces
// tile the text. A byte that is not part of valid UTF-8 counts as one character that is neither letter,
// number nor space, which keeps encoding lossless for any bytes.
size_t o200k_piece_end(std::string_view text, size_t pos);

// All pieces of `text`, in order.
std::vector<std::string_view> o200k_pieces(std::string_view text);

}  // namespace orchid::tokenizer
