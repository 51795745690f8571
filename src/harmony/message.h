// The Harmony data model: a conversation is a list of messages; a message has an author, an optional
// recipient, channel and content type, and a list of content items (text, system or developer content).
// It mirrors openai-harmony 0.0.8 field for field, so rendering and parsing can match it exactly.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

namespace orchid::harmony {

// Tool parameter schemas keep the key order of their input: the TypeScript rendering follows it.
using Json = nlohmann::ordered_json;

enum class Role { kSystem, kDeveloper, kUser, kAssistant, kTool };

std::string_view role_name(Role role);
// nullopt for anything but the five lowercase role words.
std::optional<Role> role_from_name(std::string_view name);

struct Author {
  Role role = Role::kUser;
  std::optional<std::string> name;  // a tool's name ("functions.get_weather", "browser.search")

  bool operator==(const Author&) const = default;
};

struct ToolDescription {
  std::string name;
  std::string description;
  std::optional<Json> parameters;  // a JSON Schema; absent renders as `() => any`

  bool operator==(const ToolDescription&) const = default;
};

struct ToolNamespace {
  std::string name;
  std::optional<std::string> description;
  std::vector<ToolDescription> tools;

  bool operator==(const ToolNamespace&) const = default;
};

// Namespaces render in key order; std::string compares bytes as unsigned, like Rust's BTreeMap<String>.
using ToolsMap = std::map<std::string, ToolNamespace>;

enum class ReasoningEffort { kLow, kMedium, kHigh };

std::string_view effort_name(ReasoningEffort effort);                    // "low", "medium", "high"
std::optional<ReasoningEffort> effort_from_name(std::string_view name);  // accepts low/Low/LOW etc.

struct ChannelConfig {
  std::vector<std::string> valid_channels;
  bool channel_required = true;

  bool operator==(const ChannelConfig&) const = default;
};

inline constexpr std::string_view kDefaultModelIdentity =
    "You are ChatGPT, a large language model trained by OpenAI.";
inline constexpr std::string_view kDefaultKnowledgeCutoff = "2024-06";

// Defaults follow openai-harmony's SystemContent::new(); every field may also be absent (not rendered).
struct SystemContent {
  std::optional<std::string> model_identity = std::string(kDefaultModelIdentity);
  std::optional<ReasoningEffort> reasoning_effort = ReasoningEffort::kMedium;
  std::optional<ToolsMap> tools;
  std::optional<std::string> conversation_start_date;
  std::optional<std::string> knowledge_cutoff = std::string(kDefaultKnowledgeCutoff);
  std::optional<ChannelConfig> channel_config = ChannelConfig{{"analysis", "commentary", "final"}, true};

  // Every field absent (what a JSON object with no keys means).
  static SystemContent empty();
  bool operator==(const SystemContent&) const = default;
};

struct DeveloperContent {
  std::optional<std::string> instructions;
  std::optional<ToolsMap> tools;

  bool operator==(const DeveloperContent&) const = default;
};

struct TextContent {
  std::string text;

  bool operator==(const TextContent&) const = default;
};

using Content = std::variant<TextContent, SystemContent, DeveloperContent>;

struct Message {
  Author author;
  std::optional<std::string> recipient;
  std::optional<std::string> channel;
  std::optional<std::string> content_type;
  std::vector<Content> content;

  static Message text(Role role, std::string text);
  static Message text(Author author, std::string text);
  Message& with_channel(std::string channel);
  Message& with_recipient(std::string recipient);
  Message& with_content_type(std::string content_type);

  // The concatenated text items (system/developer content contributes nothing).
  std::string text_content() const;
  bool operator==(const Message&) const = default;
};

struct Conversation {
  std::vector<Message> messages;

  bool operator==(const Conversation&) const = default;
};

// Tool namespaces with helpers used by system content (the gpt-oss built-in tools).
ToolNamespace browser_tool_namespace();
ToolNamespace python_tool_namespace();

}  // namespace orchid::harmony
