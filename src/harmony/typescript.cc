#include "harmony/typescript.h"

#include <set>

#include "harmony/json_text.h"

namespace orchid::harmony {
namespace {

// Member lookup that treats non-objects as having no members (serde_json's Value::get on a non-object).
const Json* member(const Json& v, const char* key) {
  if (!v.is_object()) return nullptr;
  auto it = v.find(key);
  return it == v.end() ? nullptr : &*it;
}

const std::string* string_member(const Json& v, const char* key) {
  const Json* m = member(v, key);
  return m && m->is_string() ? &m->get_ref<const std::string&>() : nullptr;
}

// `"s"` without escaping, as openai-harmony writes enum members, examples and string defaults.
std::string quoted(const std::string& s) {
  std::string out;
  out.reserve(s.size() + 2);
  out.push_back('"');
  out.append(s);
  out.push_back('"');
  return out;
}

bool is_enum(const Json& v) {
  const Json* e = member(v, "enum");
  return e && e->is_array() && !e->empty();
}

bool is_nullable(const Json& v) {
  const Json* n = member(v, "nullable");
  return n && n->is_boolean() && n->get<bool>();
}

// How a `default` is written in a comment. String defaults are quoted unless the schema is an enum, in which
// case openai-harmony prints them bare, except for top-level oneOf variants, which print them as JSON.
std::string default_text(const Json& def, bool enum_schema, bool enum_as_json) {
  if (def.is_string() && !enum_schema) return quoted(def.get<std::string>());
  if (def.is_string() && !enum_as_json) return def.get<std::string>();
  return compact_json(def);
}

std::string with_nullable(std::string type, const Json& schema) {
  if (is_nullable(schema) && type.find("null") == std::string::npos) type += " | null";
  return type;
}

std::string join(const std::vector<std::string>& parts, std::string_view sep) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i) out += sep;
    out += parts[i];
  }
  return out;
}

std::string top_level_one_of(const Json& variants, const std::string& indent) {
  std::string out;
  for (const Json& variant : variants) {
    out += "\n" + indent + " | ";
    out += with_nullable(schema_to_typescript(variant, indent + "   "), variant);
    std::vector<std::string> comments;
    if (const std::string* d = string_member(variant, "description")) comments.push_back(*d);
    if (const Json* def = member(variant, "default"))
      comments.push_back("default: " + default_text(*def, is_enum(variant), /*enum_as_json=*/true));
    if (!comments.empty()) out += " // " + join(comments, " ");
  }
  return out;
}

void one_of_property(const std::string& key, const Json& val, const Json& variants, bool required,
                     const std::string& indent, std::string* out) {
  const std::string* prop_desc = string_member(val, "description");
  bool skip_desc = false;
  if (prop_desc && !variants.empty()) {
    const std::string* first_desc = string_member(variants.front(), "description");
    skip_desc = first_desc && *first_desc == *prop_desc;
  }
  bool desc_above = false;
  if (!skip_desc && prop_desc) {
    *out += indent + "// " + *prop_desc + "\n";
    desc_above = true;
  }
  if (const Json* def = member(val, "default"))
    *out += indent + "// default: " + default_text(*def, is_enum(val), false) + "\n";
  *out += indent + key + (required ? "" : "?") + ":\n";
  for (size_t i = 0; i < variants.size(); ++i) {
    const Json& variant = variants[i];
    *out += indent + " | " + with_nullable(schema_to_typescript(variant, indent + "   "), variant);
    std::vector<std::string> comments;
    if (!(i == 0 && desc_above)) {
      const std::string* d = string_member(variant, "description");
      if (d && !(prop_desc && *d == *prop_desc)) comments.push_back(*d);
    }
    if (const Json* def = member(variant, "default"))
      comments.push_back("default: " + default_text(*def, is_enum(variant), false));
    if (!comments.empty()) *out += " // " + join(comments, " ");
    *out += "\n";
  }
  *out += indent + ",\n";
}

std::string object_type(const Json& schema, const std::string& indent) {
  std::string out;
  if (const std::string* d = string_member(schema, "description")) out += indent + "// " + *d + "\n";
  out += "{\n";
  const Json* props = member(schema, "properties");
  if (props && props->is_object()) {
    std::set<std::string> required;
    if (const Json* req = member(schema, "required"); req && req->is_array()) {
      for (const Json& r : *req) {
        if (r.is_string()) required.insert(r.get<std::string>());
      }
    }
    for (const auto& [key, val] : props->items()) {
      const bool req = required.count(key) > 0;
      if (const std::string* title = string_member(val, "title"))
        out += indent + "// " + *title + "\n" + indent + "//\n";
      const Json* one_of = member(val, "oneOf");
      if (!one_of) {
        if (const std::string* d = string_member(val, "description")) out += indent + "// " + *d + "\n";
      }
      if (const Json* ex = member(val, "examples"); ex && ex->is_array() && !ex->empty()) {
        out += indent + "// Examples:\n";
        for (const Json& e : *ex) {
          if (e.is_string()) out += indent + "// - " + quoted(e.get<std::string>()) + "\n";
        }
      }
      if (one_of && one_of->is_array()) {
        one_of_property(key, val, *one_of, req, indent, &out);
        continue;
      }
      out += indent + key + (req ? "" : "?") + ": ";
      out += with_nullable(schema_to_typescript(val, indent + "    "), val) + ",";
      if (!one_of) {
        if (const Json* def = member(val, "default"))
          out += " // default: " + default_text(*def, is_enum(val), false);
      }
      out += "\n";
    }
  }
  out += indent + "}";
  return out;
}

}  // namespace

std::string schema_to_typescript(const Json& schema, const std::string& indent) {
  const Json* one_of = member(schema, "oneOf");
  if (one_of && one_of->is_array()) return top_level_one_of(*one_of, indent);
  const Json* type = member(schema, "type");
  if (type && type->is_array()) {
    std::vector<std::string> names;
    for (const Json& t : *type) {
      if (t.is_string()) names.push_back(t.get<std::string>() == "integer" ? "number" : t.get<std::string>());
    }
    if (!names.empty()) return join(names, " | ");
  }
  if (!type || !type->is_string()) return "any";
  const std::string& t = type->get_ref<const std::string&>();
  if (t == "object") return object_type(schema, indent);
  if (t == "string") {
    if (const Json* e = member(schema, "enum"); e && e->is_array()) {
      std::vector<std::string> members;
      for (const Json& v : *e) {
        if (v.is_string()) members.push_back(quoted(v.get<std::string>()));
      }
      if (!members.empty()) return join(members, " | ");
    }
    return "string";
  }
  if (t == "number" || t == "integer") return "number";
  if (t == "boolean") return "boolean";
  if (t == "array") {
    const Json* items = member(schema, "items");
    return items ? schema_to_typescript(*items, indent) + "[]" : "Array<any>";
  }
  return "any";
}

std::vector<std::string_view> split_lines(std::string_view text) {
  std::vector<std::string_view> lines;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) {
      lines.push_back(text.substr(pos));
      break;
    }
    std::string_view line = text.substr(pos, nl - pos);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    lines.push_back(line);
    pos = nl + 1;
  }
  return lines;
}

std::string render_tools_section(const ToolsMap& tools) {
  std::vector<std::string> sections{"# Tools"};
  for (const auto& [key, ns] : tools) {
    std::vector<std::string> parts{"## " + ns.name + "\n"};
    if (ns.description) {
      for (std::string_view line : split_lines(*ns.description))
        parts.push_back(ns.tools.empty() ? std::string(line) : "// " + std::string(line));
    }
    if (!ns.tools.empty()) {
      parts.push_back("namespace " + ns.name + " {\n");
      for (const ToolDescription& tool : ns.tools) {
        for (std::string_view line : split_lines(tool.description))
          parts.push_back("// " + std::string(line));
        if (tool.parameters) {
          parts.push_back("type " + tool.name + " = (_: " + schema_to_typescript(*tool.parameters, "") +
                          ") => any;\n");
        } else {
          parts.push_back("type " + tool.name + " = () => any;\n");
        }
      }
      parts.push_back("} // namespace " + ns.name);
    }
    sections.push_back(join(parts, "\n"));
  }
  return join(sections, "\n\n");
}

}  // namespace orchid::harmony
