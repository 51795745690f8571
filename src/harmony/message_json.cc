#include "harmony/message_json.h"

#include "core/error.h"

namespace orchid::harmony {
namespace {

// Python's ReasoningEffort enum values, which openai-harmony's JSON carries.
std::string effort_json_name(ReasoningEffort e) {
  switch (e) {
    case ReasoningEffort::kLow:
      return "Low";
    case ReasoningEffort::kMedium:
      return "Medium";
    case ReasoningEffort::kHigh:
      return "High";
  }
  return "Medium";
}

bool present(const Json& j, const char* key) {
  return j.contains(key) && !j.at(key).is_null();
}

std::string get_string(const Json& j, const char* key, const std::string& where) {
  const Json& v = j.at(key);
  if (!v.is_string()) fail("{}.{}: expected a string", where, key);
  return v.get<std::string>();
}

std::optional<std::string> opt_string(const Json& j, const char* key, const std::string& where) {
  if (!present(j, key)) return std::nullopt;
  return get_string(j, key, where);
}

void put_opt(Json& j, const char* key, const std::optional<std::string>& v) {
  if (v) j[key] = *v;
}

Json system_to_json(const SystemContent& s) {
  Json j = Json::object();
  // openai-harmony's field order, so that its JSON and ours compare equal as ordered objects.
  put_opt(j, "model_identity", s.model_identity);
  if (s.reasoning_effort) j["reasoning_effort"] = effort_json_name(*s.reasoning_effort);
  put_opt(j, "conversation_start_date", s.conversation_start_date);
  put_opt(j, "knowledge_cutoff", s.knowledge_cutoff);
  if (s.channel_config) {
    j["channel_config"] = Json{{"valid_channels", s.channel_config->valid_channels},
                               {"channel_required", s.channel_config->channel_required}};
  }
  if (s.tools) j["tools"] = tools_to_json(*s.tools);
  j["type"] = "system_content";
  return j;
}

SystemContent system_from_json(const Json& j, const std::string& where) {
  SystemContent s = SystemContent::empty();
  s.model_identity = opt_string(j, "model_identity", where);
  if (auto e = opt_string(j, "reasoning_effort", where)) {
    s.reasoning_effort = effort_from_name(*e);
    if (!s.reasoning_effort) fail("{}.reasoning_effort: '{}' is not low, medium or high", where, *e);
  }
  if (present(j, "tools")) s.tools = tools_from_json(j.at("tools"), where + ".tools");
  s.conversation_start_date = opt_string(j, "conversation_start_date", where);
  s.knowledge_cutoff = opt_string(j, "knowledge_cutoff", where);
  if (present(j, "channel_config")) {
    const Json& c = j.at("channel_config");
    const std::string w = where + ".channel_config";
    if (!c.is_object() || !c.contains("valid_channels") || !c.at("valid_channels").is_array())
      fail("{}: expected {{\"valid_channels\": [...], \"channel_required\": bool}}", w);
    ChannelConfig cc;
    for (const Json& ch : c.at("valid_channels")) {
      if (!ch.is_string()) fail("{}.valid_channels: expected strings", w);
      cc.valid_channels.push_back(ch.get<std::string>());
    }
    if (!c.contains("channel_required") || !c.at("channel_required").is_boolean())
      fail("{}.channel_required: expected a boolean", w);
    cc.channel_required = c.at("channel_required").get<bool>();
    s.channel_config = std::move(cc);
  }
  return s;
}

Json developer_to_json(const DeveloperContent& d) {
  Json j = Json::object();
  put_opt(j, "instructions", d.instructions);
  if (d.tools) j["tools"] = tools_to_json(*d.tools);
  j["type"] = "developer_content";
  return j;
}

DeveloperContent developer_from_json(const Json& j, const std::string& where) {
  DeveloperContent d;
  d.instructions = opt_string(j, "instructions", where);
  if (present(j, "tools")) d.tools = tools_from_json(j.at("tools"), where + ".tools");
  return d;
}

Content content_from_json(const Json& j, const std::string& where) {
  if (!j.is_object() || !j.contains("type") || !j.at("type").is_string())
    fail("{}: expected an object with a \"type\"", where);
  const std::string type = j.at("type").get<std::string>();
  if (type == "text") {
    if (!j.contains("text")) fail("{}: text content without \"text\"", where);
    return TextContent{get_string(j, "text", where)};
  }
  if (type == "system_content") return system_from_json(j, where);
  if (type == "developer_content") return developer_from_json(j, where);
  fail("{}.type: unknown content type '{}'", where, type);
}

}  // namespace

Json tools_to_json(const ToolsMap& tools) {
  Json j = Json::object();
  for (const auto& [key, ns] : tools) {
    Json n = Json::object();
    n["name"] = ns.name;
    if (ns.description) n["description"] = *ns.description;
    Json list = Json::array();
    for (const ToolDescription& t : ns.tools) {
      Json tj = {{"name", t.name}, {"description", t.description}};
      if (t.parameters) tj["parameters"] = *t.parameters;
      list.push_back(std::move(tj));
    }
    n["tools"] = std::move(list);
    j[key] = std::move(n);
  }
  return j;
}

ToolsMap tools_from_json(const Json& j, const std::string& where) {
  if (!j.is_object()) fail("{}: expected an object of tool namespaces", where);
  ToolsMap out;
  for (const auto& [key, n] : j.items()) {
    const std::string w = where + "." + key;
    if (!n.is_object()) fail("{}: expected an object", w);
    ToolNamespace ns;
    if (!n.contains("name")) fail("{}: missing \"name\"", w);
    ns.name = get_string(n, "name", w);
    ns.description = opt_string(n, "description", w);
    if (!n.contains("tools") || !n.at("tools").is_array()) fail("{}.tools: expected an array", w);
    for (size_t i = 0; i < n.at("tools").size(); ++i) {
      const Json& t = n.at("tools")[i];
      const std::string tw = w + ".tools[" + std::to_string(i) + "]";
      if (!t.is_object() || !t.contains("name") || !t.contains("description"))
        fail("{}: expected {{\"name\", \"description\", \"parameters\"?}}", tw);
      ToolDescription td{get_string(t, "name", tw), get_string(t, "description", tw), std::nullopt};
      if (present(t, "parameters")) td.parameters = t.at("parameters");
      ns.tools.push_back(std::move(td));
    }
    out[key] = std::move(ns);
  }
  return out;
}

Json message_to_json(const Message& m) {
  Json j = Json::object();
  j["role"] = std::string(role_name(m.author.role));
  j["name"] = m.author.name ? Json(*m.author.name) : Json(nullptr);
  Json content = Json::array();
  for (const Content& c : m.content) {
    if (const auto* t = std::get_if<TextContent>(&c)) {
      content.push_back(Json{{"type", "text"}, {"text", t->text}});
    } else if (const auto* s = std::get_if<SystemContent>(&c)) {
      content.push_back(system_to_json(*s));
    } else {
      content.push_back(developer_to_json(std::get<DeveloperContent>(c)));
    }
  }
  j["content"] = std::move(content);
  put_opt(j, "channel", m.channel);
  put_opt(j, "recipient", m.recipient);
  put_opt(j, "content_type", m.content_type);
  return j;
}

Json conversation_to_json(const Conversation& c) {
  Json list = Json::array();
  for (const Message& m : c.messages) list.push_back(message_to_json(m));
  return Json{{"messages", std::move(list)}};
}

Message message_from_json(const Json& j, const std::string& where) {
  if (!j.is_object()) fail("{}: expected a message object", where);
  Message m;
  if (!j.contains("role") || !j.at("role").is_string()) fail("{}.role: expected a role string", where);
  const std::string role = j.at("role").get<std::string>();
  auto r = role_from_name(role);
  if (!r) fail("{}.role: unknown role '{}'", where, role);
  m.author.role = *r;
  m.author.name = opt_string(j, "name", where);
  m.recipient = opt_string(j, "recipient", where);
  m.channel = opt_string(j, "channel", where);
  m.content_type = opt_string(j, "content_type", where);
  if (!j.contains("content")) fail("{}: missing \"content\"", where);
  const Json& content = j.at("content");
  if (content.is_string()) {
    m.content.emplace_back(TextContent{content.get<std::string>()});
  } else if (content.is_array()) {
    for (size_t i = 0; i < content.size(); ++i)
      m.content.push_back(content_from_json(content[i], where + ".content[" + std::to_string(i) + "]"));
  } else {
    fail("{}.content: expected a string or an array", where);
  }
  return m;
}

Conversation conversation_from_json(const Json& j, const std::string& where) {
  const Json* list = &j;
  std::string w = where;
  if (j.is_object() && j.contains("messages")) {
    list = &j.at("messages");
    w += ".messages";
  }
  if (!list->is_array()) fail("{}: expected an array of messages", w);
  Conversation c;
  for (size_t i = 0; i < list->size(); ++i)
    c.messages.push_back(message_from_json((*list)[i], w + "[" + std::to_string(i) + "]"));
  return c;
}

}  // namespace orchid::harmony
