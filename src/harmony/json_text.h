// Compact JSON text exactly as openai-harmony writes schema defaults into prompts (serde_json's compact
// writer): no spaces, only `"` `\` and control characters escaped (lowercase \u00xx), floats in Ryu's
// shortest form (1.0, 0.001, 1e20, 1.5e-7). nlohmann's dump differs on floats (1e+20), hence this writer.
#pragma once

#include <string>

#include "harmony/message.h"

namespace orchid::harmony {

std::string compact_json(const Json& value);

// A double in serde_json/Ryu notation (finite values; non-finite ones are written as `null`).
std::string ryu_format(double value);

}  // namespace orchid::harmony
