#include "structured/output_format.h"

#include <string_view>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace orchid::structured {
namespace {

// A regex alternative matching exactly `s`.
std::string regex_literal(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (std::string_view("\\^$.|?*+()[]{}/").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

// The grammar library's "ipv4" admits leading zeros ("010.1.1.1"), which JSON Schema validators refuse
// (RFC 2673 dotted-quad): such strings get the strict pattern instead.
constexpr const char* kIpv4Pattern =
    R"(^(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])(\.(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])){3}$)";

// Its strings bounded by minLength/maxLength admit raw control characters, which JSON forbids: such strings
// get a pattern of JSON string characters (escapes count as one) with the same bounds instead.
std::string bounded_string_pattern(const nlohmann::ordered_json& j) {
  const auto bound = [&](const char* key) -> std::string {
    auto it = j.find(key);
    return it != j.end() && it->is_number_unsigned() ? std::to_string(it->get<uint64_t>()) : std::string();
  };
  const std::string lo = bound("minLength"), hi = bound("maxLength");
  return R"(^([^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4}){)" + (lo.empty() ? "0" : lo) + "," + hi + "}$";
}

void strict_formats(nlohmann::ordered_json& j) {
  if (j.is_array()) {
    for (auto& v : j) strict_formats(v);
    return;
  }
  if (!j.is_object()) return;
  if (auto f = j.find("format"); f != j.end() && *f == "ipv4" && !j.contains("pattern")) {
    j.erase("format");
    j["pattern"] = kIpv4Pattern;
  }
  if (j.value("type", nlohmann::ordered_json()) == "string" &&
      (j.contains("minLength") || j.contains("maxLength")) && !j.contains("pattern") &&
      !j.contains("format") && !j.contains("enum") && !j.contains("const")) {
    j["pattern"] = bounded_string_pattern(j);
    j.erase("minLength");
    j.erase("maxLength");
  }
  for (auto& [key, v] : j.items()) strict_formats(v);
}

std::string schema_for_grammar(const std::string& text) {
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) fail("the schema is not valid JSON");
  strict_formats(j);
  return j.dump();
}

}  // namespace

xgrammar::CompiledGrammar compile(const OutputFormat& f, GrammarVocabulary& vocab) {
  xgrammar::GrammarCompiler& c = vocab.compiler();
  const auto compact = std::make_optional(std::make_pair(std::string(","), std::string(":")));
  try {
    switch (f.kind) {
      case OutputFormat::Kind::kJsonSchema:
        return c.CompileJSONSchema(schema_for_grammar(f.text), /*any_whitespace=*/false, std::nullopt,
                                   compact, /*strict_mode=*/true);
      case OutputFormat::Kind::kJsonObject:
        return c.CompileJSONSchema(R"({"type":"object"})", false, std::nullopt, compact, false);
      case OutputFormat::Kind::kRegex:
        return c.CompileRegex(f.text);
      case OutputFormat::Kind::kGrammar:
        if (f.text.find("::=") != std::string::npos) return c.CompileGrammar(f.text, "root");
        return c.CompileLark(f.text);
      case OutputFormat::Kind::kChoice: {
        if (f.choices.empty()) fail("expected at least one choice");
        std::string re;
        for (size_t i = 0; i < f.choices.size(); ++i)
          re += (i ? "|" : "") + std::string("(") + regex_literal(f.choices[i]) + ")";
        return c.CompileRegex(re);
      }
    }
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    fail("{}", e.what());
  }
  fail("unknown output format");
}

}  // namespace orchid::structured
