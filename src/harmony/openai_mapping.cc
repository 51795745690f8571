#include "harmony/openai_mapping.h"

#include <map>
#include <vector>

#include "core/error.h"

namespace orchid::harmony {
namespace {

// What both request shapes contribute; turned into the system and developer messages at the end.
struct ConversationBuilder {
  std::vector<std::string> instructions;
  std::vector<ToolDescription> functions;
  bool browser = false;
  bool python = false;
  std::optional<ReasoningEffort> effort;
  std::vector<Message> turns;
  std::map<std::string, std::string> call_names;  // tool call id -> function name
  std::optional<std::string> response_format;     // the developer message's "# Response Formats" section

  Conversation finish(const MappingOptions& opt) {
    SystemContent sys;
    sys.conversation_start_date = opt.date;
    sys.reasoning_effort = effort.value_or(opt.default_effort);
    if (browser || python) {
      sys.tools.emplace();
      if (browser) (*sys.tools)["browser"] = browser_tool_namespace();
      if (python) (*sys.tools)["python"] = python_tool_namespace();
    }
    Conversation conv;
    Message system;
    system.author.role = Role::kSystem;
    system.content.emplace_back(std::move(sys));
    conv.messages.push_back(std::move(system));
    if (!instructions.empty() || !functions.empty() || response_format) {
      Message developer;
      developer.author.role = Role::kDeveloper;
      if (!instructions.empty() || !functions.empty()) {
        DeveloperContent dev;
        if (!instructions.empty()) {
          std::string joined;
          for (size_t i = 0; i < instructions.size(); ++i) joined += (i ? "\n\n" : "") + instructions[i];
          dev.instructions = std::move(joined);
        }
        if (!functions.empty())
          dev.tools = ToolsMap{{"functions", ToolNamespace{"functions", std::nullopt, functions}}};
        developer.content.emplace_back(std::move(dev));
      }
      // Appended to the developer text, as the Harmony guide prescribes for structured output.
      if (response_format)
        developer.content.emplace_back(
            TextContent{(developer.content.empty() ? "" : "\n\n") + *response_format});
      conv.messages.push_back(std::move(developer));
    }
    for (Message& m : turns) conv.messages.push_back(std::move(m));
    return conv;
  }

  void function_call(const std::string& id, const std::string& name, std::string arguments) {
    if (!id.empty()) call_names[id] = name;
    turns.push_back(Message::text(Role::kAssistant, std::move(arguments))
                        .with_channel("commentary")
                        .with_recipient("functions." + name)
                        .with_content_type(std::string(kFunctionCallContentType)));
  }

  void function_result(const std::string& name, std::string output) {
    turns.push_back(Message::text(Author{Role::kTool, "functions." + name}, std::move(output))
                        .with_channel("commentary")
                        .with_recipient("assistant"));
  }
};

const Json* field(const Json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

std::string string_field(const Json& j, const char* key, const std::string& where, bool required = true) {
  const Json* v = field(j, key);
  if (!v) {
    if (required) fail("{}.{}: missing", where, key);
    return "";
  }
  if (!v->is_string()) fail("{}.{}: expected a string", where, key);
  return v->get<std::string>();
}

// The text parts of a message content ("text", "input_text", "output_text", "reasoning_text").
std::vector<std::string> text_parts(const Json& content, const std::string& where) {
  if (content.is_string()) return {content.get<std::string>()};
  if (!content.is_array()) fail("{}: expected a string or an array of content parts", where);
  std::vector<std::string> parts;
  for (size_t i = 0; i < content.size(); ++i) {
    const std::string w = where + "[" + std::to_string(i) + "]";
    const std::string type = string_field(content[i], "type", w);
    if (type != "text" && type != "input_text" && type != "output_text" && type != "reasoning_text")
      fail("{}.type: content parts of type '{}' are not supported (text only)", w, type);
    parts.push_back(string_field(content[i], "text", w));
  }
  return parts;
}

std::string joined_text(const Json& content, const std::string& where, const char* sep) {
  std::string out;
  const std::vector<std::string> parts = text_parts(content, where);
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? sep : "") + parts[i];
  return out;
}

ReasoningEffort parse_effort(const Json& v, const std::string& where) {
  if (!v.is_string()) fail("{}: expected \"none\", \"minimal\", \"low\", \"medium\" or \"high\"", where);
  const std::string name = v.get<std::string>();
  // The OpenAI API also names "none" and "minimal" (the OpenAI Agents SDK sends them); Harmony's least
  // effort is low, and gpt-oss always reasons, so both mean low.
  if (name == "none" || name == "minimal") return ReasoningEffort::kLow;
  auto e = effort_from_name(name);
  if (!e) fail("{}: '{}' is not none, minimal, low, medium or high", where, name);
  return *e;
}

ToolDescription function_tool(const Json& f, const std::string& where) {
  ToolDescription t{string_field(f, "name", where), string_field(f, "description", where, false),
                    std::nullopt};
  if (const Json* p = field(f, "parameters")) t.parameters = *p;
  return t;
}

std::string arguments_text(const Json& call, const std::string& where) {
  const Json* a = field(call, "arguments");
  if (!a) return "";
  return a->is_string() ? a->get<std::string>() : a->dump();
}

void chat_message(const Json& m, const std::string& where, bool after_last_user, ConversationBuilder* b) {
  const std::string role = string_field(m, "role", where);
  const Json* content = field(m, "content");
  if (role == "system" || role == "developer") {
    b->instructions.push_back(content ? joined_text(*content, where + ".content", "\n") : "");
  } else if (role == "user") {
    b->turns.push_back(
        Message::text(Role::kUser, content ? joined_text(*content, where + ".content", "\n") : ""));
  } else if (role == "assistant") {
    // Chain of thought is replayed only for the tool loop still running (after the last user message).
    for (const char* key : {"reasoning", "reasoning_content", "thinking"}) {
      const std::string r = string_field(m, key, where, false);
      if (!r.empty() && after_last_user) {
        b->turns.push_back(Message::text(Role::kAssistant, r).with_channel("analysis"));
        break;
      }
    }
    const Json* calls = field(m, "tool_calls");
    const bool has_calls = calls && calls->is_array() && !calls->empty();
    const std::string text = content ? joined_text(*content, where + ".content", "\n") : "";
    // Text next to tool calls is a preamble (commentary); otherwise it is the answer (final).
    if (has_calls ? !text.empty() : content != nullptr)
      b->turns.push_back(
          Message::text(Role::kAssistant, text).with_channel(has_calls ? "commentary" : "final"));
    if (calls && !calls->is_array()) fail("{}.tool_calls: expected an array", where);
    for (size_t k = 0; has_calls && k < calls->size(); ++k) {
      const std::string w = where + ".tool_calls[" + std::to_string(k) + "]";
      const Json* fn = field((*calls)[k], "function");
      if (!fn) fail("{}.function: missing", w);
      b->function_call(string_field((*calls)[k], "id", w, false), string_field(*fn, "name", w + ".function"),
                       arguments_text(*fn, w + ".function"));
    }
  } else if (role == "tool") {
    const std::string id = string_field(m, "tool_call_id", where, false);
    auto it = b->call_names.find(id);
    std::string name = it != b->call_names.end() ? it->second : string_field(m, "name", where, false);
    if (name.empty()) fail("{}.tool_call_id: no earlier assistant tool call has id '{}'", where, id);
    b->function_result(name, content ? joined_text(*content, where + ".content", "\n") : "");
  } else {
    fail("{}.role: unknown role '{}'", where, role);
  }
}

// "# Response Formats\n\n## {name}\n\n// {description}\n{schema}" (no "//" line without a description);
// the schema as compact JSON in the request's key order.
std::string response_format_section(const Json& format, const std::string& where) {
  if (!format.is_object()) fail("{}: expected an object", where);
  const Json* schema = field(format, "schema");
  if (!schema) return {};  // the format's own checks (server) name what is missing
  std::string name = "response";
  if (const Json* n = field(format, "name"); n && n->is_string()) name = n->get<std::string>();
  std::string out = "# Response Formats\n\n## " + name + "\n\n";
  if (const Json* d = field(format, "description"); d && d->is_string() && !d->get<std::string>().empty())
    out += "// " + d->get<std::string>() + "\n";
  return out + schema->dump();
}

}  // namespace

Conversation conversation_from_chat_request(const Json& request, const MappingOptions& options) {
  if (!request.is_object()) fail("request: expected a JSON object");
  ConversationBuilder b;
  if (const Json* e = field(request, "reasoning_effort"))
    b.effort = parse_effort(*e, "request.reasoning_effort");
  if (const Json* r = field(request, "reasoning"); r && field(*r, "effort"))
    b.effort = parse_effort(*field(*r, "effort"), "request.reasoning.effort");
  if (const Json* tools = field(request, "tools")) {
    if (!tools->is_array()) fail("request.tools: expected an array");
    for (size_t i = 0; i < tools->size(); ++i) {
      const std::string w = "request.tools[" + std::to_string(i) + "]";
      const std::string type = string_field((*tools)[i], "type", w);
      if (type != "function") fail("{}.type: only \"function\" tools are supported, got '{}'", w, type);
      const Json* f = field((*tools)[i], "function");
      if (!f) fail("{}.function: missing", w);
      b.functions.push_back(function_tool(*f, w + ".function"));
    }
  }
  if (const Json* rf = field(request, "response_format");
      rf && rf->is_object() && field(*rf, "type") && (*rf)["type"] == "json_schema") {
    if (const Json* js = field(*rf, "json_schema")) {
      std::string section = response_format_section(*js, "request.response_format.json_schema");
      if (!section.empty()) b.response_format = std::move(section);
    }
  }
  const Json* messages = field(request, "messages");
  if (!messages || !messages->is_array()) fail("request.messages: expected an array of messages");
  size_t last_user = 0;
  bool any_user = false;
  for (size_t i = 0; i < messages->size(); ++i) {
    if (field((*messages)[i], "role") && (*messages)[i].at("role") == "user") {
      last_user = i;
      any_user = true;
    }
  }
  for (size_t i = 0; i < messages->size(); ++i)
    chat_message((*messages)[i], "request.messages[" + std::to_string(i) + "]", !any_user || i > last_user,
                 &b);
  return b.finish(options);
}

Conversation conversation_from_responses_request(const Json& request, const MappingOptions& options) {
  if (!request.is_object()) fail("request: expected a JSON object");
  ConversationBuilder b;
  if (const Json* r = field(request, "reasoning"); r && field(*r, "effort"))
    b.effort = parse_effort(*field(*r, "effort"), "request.reasoning.effort");
  if (const Json* instr = field(request, "instructions")) {
    if (!instr->is_string()) fail("request.instructions: expected a string");
    b.instructions.push_back(instr->get<std::string>());
  }
  if (const Json* text = field(request, "text"); text && text->is_object()) {
    if (const Json* f = field(*text, "format");
        f && f->is_object() && field(*f, "type") && (*f)["type"] == "json_schema") {
      std::string section = response_format_section(*f, "request.text.format");
      if (!section.empty()) b.response_format = std::move(section);
    }
  }
  if (const Json* tools = field(request, "tools")) {
    if (!tools->is_array()) fail("request.tools: expected an array");
    for (size_t i = 0; i < tools->size(); ++i) {
      const std::string w = "request.tools[" + std::to_string(i) + "]";
      const std::string type = string_field((*tools)[i], "type", w);
      if (type == "function") {
        b.functions.push_back(function_tool((*tools)[i], w));
      } else if (type == "web_search" || type == "web_search_preview" || type == "browser_search") {
        b.browser = true;
      } else if (type == "code_interpreter") {
        b.python = true;
      } else {
        fail("{}.type: tools of type '{}' are not supported", w, type);
      }
    }
  }
  const Json* input = field(request, "input");
  if (!input) fail("request.input: missing");
  if (input->is_string()) {
    b.turns.push_back(Message::text(Role::kUser, input->get<std::string>()));
    return b.finish(options);
  }
  if (!input->is_array()) fail("request.input: expected a string or an array of items");
  auto type_of = [](const Json& item) {
    const Json* t = field(item, "type");
    return t && t->is_string() ? t->get<std::string>() : std::string("message");
  };
  // Reasoning is replayed only while a tool loop runs: after the last assistant message, and only when the
  // input ends with a function result (the reference server's rule).
  size_t last_assistant = 0;
  bool any_assistant = false;
  for (size_t i = 0; i < input->size(); ++i) {
    if (type_of((*input)[i]) == "message" && field((*input)[i], "role") &&
        (*input)[i].at("role") == "assistant") {
      last_assistant = i;
      any_assistant = true;
    }
  }
  const bool ends_with_output = !input->empty() && type_of(input->back()) == "function_call_output";
  for (size_t i = 0; i < input->size(); ++i) {
    const Json& item = (*input)[i];
    const std::string w = "request.input[" + std::to_string(i) + "]";
    const std::string type = type_of(item);
    if (type == "message") {
      const std::string role = string_field(item, "role", w);
      const Json* content = field(item, "content");
      if (!content) fail("{}.content: missing", w);
      if (role == "system" || role == "developer") {
        b.instructions.push_back(joined_text(*content, w + ".content", "\n"));
      } else if (role == "user" || role == "assistant") {
        for (std::string& part : text_parts(*content, w + ".content")) {
          Message m = Message::text(*role_from_name(role), std::move(part));
          if (role == "assistant") m.channel = "final";
          b.turns.push_back(std::move(m));
        }
      } else {
        fail("{}.role: unknown role '{}'", w, role);
      }
    } else if (type == "reasoning") {
      if ((!any_assistant || i > last_assistant) && ends_with_output) {
        const Json* content = field(item, "content");
        const std::string text = content ? joined_text(*content, w + ".content", "") : "";
        if (!text.empty()) b.turns.push_back(Message::text(Role::kAssistant, text).with_channel("analysis"));
      }
    } else if (type == "function_call") {
      b.function_call(string_field(item, "call_id", w, false), string_field(item, "name", w),
                      arguments_text(item, w));
    } else if (type == "function_call_output") {
      const std::string id = string_field(item, "call_id", w);
      auto it = b.call_names.find(id);
      if (it == b.call_names.end()) fail("{}.call_id: no earlier function_call has call_id '{}'", w, id);
      const Json* out = field(item, "output");
      b.function_result(
          it->second,
          out ? (out->is_string() ? out->get<std::string>() : joined_text(*out, w + ".output", "\n")) : "");
    } else {
      fail("{}.type: input items of type '{}' are not supported", w, type);
    }
  }
  return b.finish(options);
}

}  // namespace orchid::harmony
