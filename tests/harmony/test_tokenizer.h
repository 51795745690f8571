// The tokenizer the Harmony tests run with.
#pragma once

#include <memory>

#include "tokenizer/tokenizer.h"

namespace orchid::harmony::testing {

std::shared_ptr<const tokenizer::Tokenizer> test_tokenizer();
// False while the tokenizer used here can only decode (then id-level render checks are skipped).
bool test_tokenizer_encodes();

}  // namespace orchid::harmony::testing
