// Compact JSON text exactly as openai-harmony writes schema defaults into prompts (serde_json's compact
// writer): no spaces, only `"` `\` and control characters escaped (lowercase \u00xx), floats in Ryu's
// shortest form (1.0, 0.001, 1e20, 1.5e-7). nlohmann's dump differs on floats (1e+20), hence this writer.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "harmony/message.h"

namespace orchid::harmony {

std::string compact_json(const Json& value);

// Parses JSON text, reading fractional numbers the way serde_json (without float_roundtrip) does: the
// decimal significand times or divided by a power of ten in f64 arithmetic. That can differ from the
// correctly rounded value by an ulp for long significands, and openai-harmony prints what serde read, so
// requests are parsed with this to render exactly the same defaults. Throws orchid::Error on bad JSON or on
// a number serde rejects (out of f64 range), naming `where`.
Json parse_json(std::string_view text, const std::string& where);

// serde_json's f64 for one JSON number lexeme; nullopt when serde rejects it as out of range.
std::optional<double> serde_parse_f64(std::string_view lexeme);

// A double in serde_json/Ryu notation (finite values; non-finite ones are written as `null`).
std::string ryu_format(double value);

}  // namespace orchid::harmony
