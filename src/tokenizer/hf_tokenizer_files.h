// The Hugging Face tokenizer files of a model directory, made from a byte-level BPE vocabulary:
// tokenizer.json (the `tokenizers` format) and tokenizer_config.json (what transformers reads besides it).
// For the built-in vocabulary they are laid out as the ones published with gpt-oss, so that a directory
// written by `orchid synth` loads in transformers, tokenizers and orchid alike.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/vocabulary.h"

namespace orchid::tokenizer {

// A merge rule: two ranks whose bytes, joined, are the bytes of another rank.
struct Merge {
  int32_t left, right;
};

// The merges of a vocabulary that has only ranks (tiktoken's form): for each token of two or more bytes, in
// rank order, every split into two tokens, ordered by the left rank and then the right rank.
std::vector<Merge> bpe_merges(const Vocabulary& vocab);

// The special tokens a tokenizer.json lists as added tokens (see the .cc for which).
std::vector<SpecialToken> hf_added_tokens(const Vocabulary& vocab);

// The files' text.
std::string hf_tokenizer_json(const Vocabulary& vocab);
std::string hf_tokenizer_config_json(const Vocabulary& vocab);

// Writes tokenizer.json and tokenizer_config.json into the existing directory `dir`.
void write_hf_tokenizer_files(const std::string& dir, const Vocabulary& vocab);

}  // namespace orchid::tokenizer
