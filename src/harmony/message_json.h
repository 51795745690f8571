// Harmony messages <-> JSON in openai-harmony's own shape ({"role", "name", "recipient", "channel",
// "content_type", "content": [{"type": "text" | "system_content" | "developer_content", ...}]}).
// Used by golden files, `orchid render` (a conversation already in Harmony shape) and logs.
// Absent or null fields stay absent: a JSON system_content with no "knowledge_cutoff" renders none.
#pragma once

#include <string>

#include "harmony/message.h"

namespace orchid::harmony {

Json message_to_json(const Message& message);
Json conversation_to_json(const Conversation& conversation);  // {"messages": [...]}

// `where` names the input in error messages (a file name, "request.messages", ...).
Message message_from_json(const Json& j, const std::string& where);
// Accepts {"messages": [...]} or a bare array of messages.
Conversation conversation_from_json(const Json& j, const std::string& where);

Json tools_to_json(const ToolsMap& tools);
ToolsMap tools_from_json(const Json& j, const std::string& where);

}  // namespace orchid::harmony
