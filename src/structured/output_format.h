// A requested output format (JSON Schema, any JSON object, a regex, an EBNF or Lark grammar, a choice of
// strings) and its compilation against the vocabulary.
#pragma once

#include <string>
#include <vector>

#include <xgrammar/xgrammar.h>

#include "structured/grammar_vocabulary.h"

namespace orchid::structured {

struct OutputFormat {
  enum class Kind { kJsonSchema, kJsonObject, kRegex, kGrammar, kChoice };
  Kind kind = Kind::kJsonObject;
  std::string text;                  // the schema (JSON text), the regex or the grammar
  std::vector<std::string> choices;  // kChoice
};

// Throws orchid::Error with the library's reason when the schema, regex or grammar is not usable. JSON is
// compact (no free whitespace between tokens): nothing the schema allows is lost, and a sampler can never
// spend its budget on blanks. A grammar holding "::=" is read as xgrammar's EBNF (root rule `root`),
// anything else as Lark (start rule `start`).
xgrammar::CompiledGrammar compile(const OutputFormat& format, GrammarVocabulary& vocab);

}  // namespace orchid::structured
