// Fuzzes the streaming parser with id sequences biased towards Harmony structure (special tokens, header
// words, ids that split UTF-8 characters, unknown ids), in both modes:
//  - lenient must never throw, and the content deltas of a message must add up to its current content;
//  - strict may throw orchid::Error only.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/error.h"
#include "harmony/stream_parser.h"
#include "harmony/tokens.h"
#include "harmony/utf8.h"

using namespace orchid::harmony;

namespace {

const std::shared_ptr<const orchid::tokenizer::Tokenizer>& tok() {
  static const auto t = orchid::tokenizer::Tokenizer::builtin();
  return t;
}

constexpr int32_t kStructural[] = {kStartId,     kEndId,    kMessageId, kChannelId,
                                   kConstrainId, kReturnId, kCallId};
// assistant, analysis, final, "comment" "ary", " to", "=", "functions", ".", "json", " ", "user", "browser",
// and ids whose bytes end or start in the middle of a UTF-8 character.
constexpr int32_t kWords[] = {173781, 35644, 17196, 12606, 815,  316, 28,  44580, 13,   4108, 220,   1428,
                              52454,  9552,  31446, 244,   3490, 25,  392, 10848, 7693, 1243, 200018};

int32_t next_id(const uint8_t* p) {
  const uint16_t v = static_cast<uint16_t>(p[0] | (p[1] << 8));
  const unsigned k = v & 0x1FFF;
  switch (v >> 13) {
    case 0:
    case 1:
      return kStructural[k % std::size(kStructural)];
    case 2:
    case 3:
      return kWords[k % std::size(kWords)];
    case 4:
      return k % 3 == 0 ? -static_cast<int32_t>(k) : 201088 + static_cast<int32_t>(k);
    default:
      return static_cast<int32_t>((static_cast<uint32_t>(v) * 2654435761u) % 201100u);
  }
}

void check(bool ok) {
  if (!ok) std::abort();
}

void run(const std::vector<int32_t>& ids, std::optional<Role> role, bool strict) {
  StreamParser parser(tok(), role, strict);
  // The deltas of a message add up to its current content, and each one is valid UTF-8. Checked in O(1)
  // per token (sizes), fully when the message ends and after the last token.
  std::string deltas;
  bool was_content = false;
  size_t finished = 0;
  for (int32_t id : ids) {
    parser.process(id);
    const bool is_content = parser.state() == StreamState::kContent;
    if (parser.messages().size() > finished) {
      if (was_content) check(parser.messages().back().text_content().starts_with(deltas));
      finished = parser.messages().size();
    }
    if (!is_content || !was_content) deltas.clear();
    if (is_content && parser.last_content_delta()) {
      check(check_utf8(*parser.last_content_delta()).valid);
      deltas += *parser.last_content_delta();
    }
    check(deltas.size() == parser.current_content().size());
    was_content = is_content;
    (void)parser.current_role();
    (void)parser.current_recipient();
  }
  check(deltas == parser.current_content());
  parser.process_eos();
  for (const Message& m : parser.messages()) check(check_utf8(m.text_content()).valid);
  check(strict || parser.state() != StreamState::kHeader);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::optional<Role> roles[] = {std::nullopt, Role::kAssistant, Role::kUser, Role::kTool};
  const std::optional<Role> role = roles[data[0] & 3];
  std::vector<int32_t> ids;
  for (size_t i = 1; i + 1 < size; i += 2) ids.push_back(next_id(data + i));
  run(ids, role, /*strict=*/false);
  try {
    run(ids, role, /*strict=*/true);
  } catch (const orchid::Error&) {
  }
  return 0;
}
