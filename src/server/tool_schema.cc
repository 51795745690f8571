#include "server/tool_schema.h"

#include <set>

#include "server/api_error.h"

namespace orchid::server {

namespace {

const std::set<std::string> kSchemaTypes = {"object",  "array",   "string", "number",
                                            "integer", "boolean", "null"};

void check_schema_list(const Json& v, const std::string& param) {
  if (!v.is_array()) bad_request(param, "{}: expected an array of schemas, got {}", param, json_type_name(v));
  for (size_t i = 0; i < v.size(); ++i) check_parameters_schema(v[i], param + "[" + std::to_string(i) + "]");
}

}  // namespace

void check_function_name(const std::string& name, const std::string& param) {
  if (name.empty() || name.size() > 64)
    bad_request(param, "{}: function names must be 1 to 64 characters long, got {}", param, name.size());
  for (char c : name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-'))
      bad_request(param, "{}: '{}' is not a valid function name (letters, digits, '_' and '-' only)", param,
                  name);
}

void check_parameters_schema(const Json& s, const std::string& param) {
  if (s.is_boolean()) return;  // true / false are schemas too
  if (!s.is_object())
    bad_request(param, "{}: a JSON Schema must be an object, got {}", param, json_type_name(s));
  if (auto it = s.find("type"); it != s.end()) {
    auto check_type = [&](const Json& t) {
      if (!t.is_string() || !kSchemaTypes.count(t.get<std::string>()))
        bad_request(param + ".type", "{}.type: {} is not a JSON Schema type", param, t.dump());
    };
    if (it->is_array()) {
      for (const auto& t : *it) check_type(t);
    } else {
      check_type(*it);
    }
  }
  if (auto it = s.find("properties"); it != s.end()) {
    if (!it->is_object())
      bad_request(param + ".properties", "{}.properties: expected an object, got {}", param,
                  json_type_name(*it));
    for (auto p = it->begin(); p != it->end(); ++p)
      check_parameters_schema(p.value(), param + ".properties." + p.key());
  }
  if (auto it = s.find("required"); it != s.end()) {
    if (!it->is_array())
      bad_request(param + ".required", "{}.required: expected an array of names, got {}", param,
                  json_type_name(*it));
    for (const auto& r : *it)
      if (!r.is_string())
        bad_request(param + ".required", "{}.required: expected names, got {}", param, r.dump());
  }
  if (auto it = s.find("items"); it != s.end()) {
    if (it->is_array()) {
      check_schema_list(*it, param + ".items");
    } else {
      check_parameters_schema(*it, param + ".items");
    }
  }
  for (const char* k : {"oneOf", "anyOf", "allOf"})
    if (auto it = s.find(k); it != s.end()) check_schema_list(*it, param + "." + k);
  if (auto it = s.find("enum"); it != s.end() && !it->is_array())
    bad_request(param + ".enum", "{}.enum: expected an array, got {}", param, json_type_name(*it));
  for (const char* k : {"description", "title"})
    if (auto it = s.find(k); it != s.end() && !it->is_string())
      bad_request(param + "." + k, "{}.{}: expected a string, got {}", param, k, json_type_name(*it));
  if (auto it = s.find("additionalProperties"); it != s.end() && !it->is_boolean())
    check_parameters_schema(*it, param + ".additionalProperties");
}

namespace {

FunctionTool check_function(JsonFields& f, std::vector<FunctionTool>& seen) {
  FunctionTool t;
  const auto name = f.string("name");
  if (!name) bad_request(f.name("name"), "{}: missing", f.name("name"));
  check_function_name(*name, f.name("name"));
  for (const auto& s : seen)
    if (s.name == *name) bad_request(f.name("name"), "{}: two tools are named '{}'", f.name("name"), *name);
  t.name = *name;
  f.string("description");
  t.strict = f.boolean("strict").value_or(false);
  if ((t.parameters = f.get("parameters"))) check_parameters_schema(*t.parameters, f.name("parameters"));
  f.reject_unknown();
  return t;
}

void check_tools_array(const Json& tools) {
  if (!tools.is_array()) bad_request("tools", "tools: expected an array, got {}", json_type_name(tools));
  if (tools.size() > 512) bad_request("tools", "tools: {} tools; at most 512 are allowed", tools.size());
}

}  // namespace

std::vector<FunctionTool> check_chat_tools(const Json& tools) {
  check_tools_array(tools);
  std::vector<FunctionTool> out;
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string where = "tools[" + std::to_string(i) + "]";
    JsonFields f(tools[i], where);
    const auto type = f.string("type");
    if (type != "function")
      bad_request(f.name("type"), "{}: only \"function\" tools are supported, got {}", f.name("type"),
                  type ? "'" + *type + "'" : std::string("none"));
    const Json* fn = f.get("function");
    if (!fn) bad_request(f.name("function"), "{}: missing", f.name("function"));
    JsonFields ff(*fn, f.name("function"));
    out.push_back(check_function(ff, out));
    f.reject_unknown();
  }
  return out;
}

std::vector<FunctionTool> check_responses_tools(const Json& tools) {
  check_tools_array(tools);
  std::vector<FunctionTool> out;
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string where = "tools[" + std::to_string(i) + "]";
    JsonFields f(tools[i], where);
    const auto type = f.string("type");
    if (type != "function")
      bad_request(f.name("type"),
                  "{}: only \"function\" tools are supported (this server runs no built-in tools), got {}",
                  f.name("type"), type ? "'" + *type + "'" : std::string("none"));
    out.push_back(check_function(f, out));
  }
  return out;
}

ToolChoice check_tool_choice(const Json* choice, const std::vector<FunctionTool>& tools, bool chat_shape,
                             std::string* name) {
  if (!choice) return ToolChoice::kAuto;
  ToolChoice mode;
  if (choice->is_string()) {
    const std::string s = choice->get<std::string>();
    if (s == "auto") {
      mode = ToolChoice::kAuto;
    } else if (s == "none") {
      mode = ToolChoice::kNone;
    } else if (s == "required") {
      mode = ToolChoice::kRequired;
    } else {
      bad_request("tool_choice", "tool_choice: '{}' is not auto, none, required or a function", s);
    }
  } else if (choice->is_object()) {
    JsonFields f(*choice, "tool_choice");
    if (f.string("type") != "function")
      bad_request("tool_choice.type", "tool_choice.type: expected \"function\"");
    std::optional<std::string> n;
    if (chat_shape) {
      const Json* fn = f.get("function");
      if (!fn) bad_request("tool_choice.function", "tool_choice.function: missing");
      JsonFields ff(*fn, "tool_choice.function");
      n = ff.string("name");
      ff.reject_unknown();
    } else {
      n = f.string("name");
    }
    f.reject_unknown();
    if (!n) bad_request("tool_choice", "tool_choice: the function's name is missing");
    bool found = false;
    for (const auto& t : tools) found = found || t.name == *n;
    if (!found) bad_request("tool_choice", "tool_choice: no tool is named '{}'", *n);
    *name = *n;
    mode = ToolChoice::kNamed;
  } else {
    bad_request("tool_choice", "tool_choice: expected a string or an object, got {}",
                json_type_name(*choice));
  }
  if (mode == ToolChoice::kRequired && tools.empty())
    bad_request("tool_choice", "tool_choice: \"required\" needs at least one tool");
  return mode;
}

}  // namespace orchid::server
