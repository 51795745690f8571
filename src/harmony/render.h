// Conversation -> tokens, exactly as openai-harmony 0.0.8 renders them.
//
// Rendering happens in two steps. First a conversation becomes a list of pieces: structural special tokens
// and text fragments. Then each text fragment is encoded on its own with ordinary BPE (special-token
// literals inside user text stay plain text) and the ids are concatenated. Fragments are not merged:
// openai-harmony encodes "assistant", " to=functions.f", "commentary", ... separately, and BPE over the
// joined text could pick different merges at the seams.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "harmony/message.h"
#include "tokenizer/tokenizer.h"

namespace orchid::harmony {

struct Piece {
  int32_t special = -1;  // >= 0: this one special token; otherwise `text`, encoded ordinarily
  std::string text;

  bool is_special() const { return special >= 0; }
  bool operator==(const Piece&) const = default;
};
using Pieces = std::vector<Piece>;

struct RenderOptions {
  // Adds "Calls to these tools must go to the commentary channel: 'functions'." to the system message.
  bool conversation_has_function_tools = false;
};

struct RenderConfig {
  // Drop analysis messages that come before the first final message, when the last assistant message is a
  // final one (openai-harmony's rule; analysis from later turns is kept).
  bool auto_drop_analysis = true;
};

// One message. Throws orchid::Error for a tool message without a name, or system/developer content in a
// message of another role.
Pieces render_message(const Message& message, const RenderOptions& options = {});
// All messages (after the drop rule); the function-tools flag is computed from the conversation.
Pieces render_conversation(const Conversation& conversation, const RenderConfig& config = {});
// ... followed by <|start|> and the next role: the prompt the model continues.
Pieces render_for_completion(const Conversation& conversation, Role next_role,
                             const RenderConfig& config = {});
// As render_conversation, but a trailing assistant final message ends with <|return|> instead of <|end|>.
Pieces render_for_training(const Conversation& conversation, const RenderConfig& config = {});

// True if a developer message declares at least one tool in the "functions" namespace.
bool has_function_tools(const Conversation& conversation);
// Which messages render_conversation keeps (the CoT drop rule), by index.
std::vector<size_t> kept_message_indices(const Conversation& conversation, const RenderConfig& config);

// The prompt ids for the model to continue as `next_role` (usually assistant).
std::vector<int32_t> render_completion_ids(const Conversation& conversation, const tokenizer::Tokenizer& tok,
                                           Role next_role = Role::kAssistant,
                                           const RenderConfig& config = {});

// The text of the pieces, special tokens written as their literals.
std::string pieces_text(const Pieces& pieces);
// Token ids: text fragments encoded one by one with encode_ordinary.
std::vector<int32_t> pieces_ids(const Pieces& pieces, const tokenizer::Tokenizer& tok);

// The body text of system and developer messages (one text fragment each).
std::string system_body(const SystemContent& content, const RenderOptions& options);
std::string developer_body(const DeveloperContent& content);

}  // namespace orchid::harmony
