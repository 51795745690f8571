// Whether two tokenizers are the same, for tests that build one tokenizer in two ways.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "test_data.h"
#include "tokenizer/tokenizer.h"

namespace orchid::tokenizer::testing {

// Every id decodes alike, every literal maps alike, and every `stride`-th corpus document encodes alike.
inline void expect_same_tokenizer(const Tokenizer& a, const Tokenizer& b, size_t stride = 7) {
  ASSERT_EQ(a.vocab_size(), b.vocab_size());
  for (int32_t id = 0; id < a.vocab_size(); ++id) {
    std::string x, y;
    ASSERT_EQ(a.decode_append(id, &x), b.decode_append(id, &y)) << id;
    ASSERT_EQ(x, y) << id;
    ASSERT_EQ(a.is_special(id), b.is_special(id)) << id;
  }
  ASSERT_EQ(a.special_literals(), b.special_literals());
  for (const std::string& literal : a.special_literals())
    ASSERT_EQ(a.special_id(literal), b.special_id(literal));
  const auto& docs = corpus();
  for (size_t i = 0; i < docs.size(); i += stride)
    ASSERT_EQ(a.encode_ordinary(docs[i]), b.encode_ordinary(docs[i])) << "corpus document " << i;
}

}  // namespace orchid::tokenizer::testing
