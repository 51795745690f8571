// Fuzzes request JSON -> Harmony conversation -> rendered prompt (Chat and Responses mappings, openai-harmony
// message JSON, tool schemas of any shape). Bad input may only raise orchid::Error.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/error.h"
#include "harmony/json_text.h"
#include "harmony/message_json.h"
#include "harmony/openai_mapping.h"
#include "harmony/render.h"

using namespace orchid::harmony;

namespace {

void render_all(const Conversation& conv) {
  for (bool drop : {true, false}) {
    (void)pieces_text(render_for_completion(conv, Role::kAssistant, RenderConfig{drop}));
    (void)pieces_text(render_for_training(conv, RenderConfig{drop}));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  Json j;
  try {
    j = parse_json(text, "input");
  } catch (const orchid::Error&) {
    return 0;
  }
  using Mapper = Conversation (*)(const Json&);
  const Mapper mappers[] = {
      [](const Json& r) { return conversation_from_chat_request(r); },
      [](const Json& r) { return conversation_from_responses_request(r); },
      [](const Json& r) { return conversation_from_json(r, "input"); },
  };
  for (Mapper m : mappers) {
    try {
      render_all(m(j));
    } catch (const orchid::Error&) {
    }
  }
  return 0;
}
