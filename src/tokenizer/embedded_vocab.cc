// The assembler's .incbin copies the file into .rodata at build time: no generated 3.6 MB C array to compile,
// and no file to find at run time. ORCHID_VOCAB_FILE is the file's absolute path as a string literal, set by
// CMakeLists.txt (which also makes this file depend on it).
#include "tokenizer/embedded_vocab.h"

__asm__(
    ".pushsection .rodata.orchid_o200k_base,\"a\",@progbits\n"
    ".balign 16\n"
    ".hidden orchid_o200k_base_begin\n"
    ".globl orchid_o200k_base_begin\n"
    "orchid_o200k_base_begin:\n"
    ".incbin \"" ORCHID_VOCAB_FILE
    "\"\n"
    ".hidden orchid_o200k_base_end\n"
    ".globl orchid_o200k_base_end\n"
    "orchid_o200k_base_end:\n"
    ".popsection\n");

extern "C" {
extern const char orchid_o200k_base_begin[] __attribute__((visibility("hidden")));
extern const char orchid_o200k_base_end[] __attribute__((visibility("hidden")));
}

namespace orchid::tokenizer {

std::string_view embedded_o200k_base() {
  return std::string_view(orchid_o200k_base_begin,
                          static_cast<size_t>(orchid_o200k_base_end - orchid_o200k_base_begin));
}

}  // namespace orchid::tokenizer
