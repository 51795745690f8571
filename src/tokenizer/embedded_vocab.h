// The o200k_base ranks shipped inside the binary (assets/tokenizer/o200k_base.tiktoken), so that synthetic
// models and machines without a model download have a tokenizer without any file at run time.
#pragma once

#include <string_view>

namespace orchid::tokenizer {

// The file's bytes, as committed (sha256 446a9538…b1a2d).
std::string_view embedded_o200k_base();

}  // namespace orchid::tokenizer
