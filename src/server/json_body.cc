#include "server/json_body.h"

#include <cmath>

#include "server/api_error.h"

namespace orchid::server {

namespace {

// nlohmann's parser is iterative, but serialising and walking a value recurse: bound the depth before
// parsing. Brackets inside strings do not count.
void check_depth(std::string_view s) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char c : s) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth)
        throw ApiError(400, fmt::format("request body nests JSON deeper than {} levels", kMaxJsonDepth));
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
}

}  // namespace

Json parse_json_body(std::string_view body) {
  if (body.empty()) throw ApiError(400, "request body is empty; expected a JSON object");
  check_depth(body);
  try {
    return Json::parse(body);
  } catch (const Json::exception& e) {
    // e.what() carries the byte offset and what was wrong (including ill-formed UTF-8 in a string).
    throw ApiError(400, fmt::format("request body is not valid JSON: {}", e.what()));
  }
}

std::string json_text(const Json& value) {
  return value.dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string_view json_type_name(const Json& v) {
  switch (v.type()) {
    case Json::value_t::null:
      return "null";
    case Json::value_t::boolean:
      return "boolean";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
      return "integer";
    case Json::value_t::number_float:
      return "number";
    case Json::value_t::string:
      return "string";
    case Json::value_t::array:
      return "array";
    case Json::value_t::object:
      return "object";
    default:
      return "value";
  }
}

JsonFields::JsonFields(const Json& object, std::string where) : obj_(object), where_(std::move(where)) {
  if (!obj_.is_object())
    bad_request(where_, "{}: expected an object, got {}", where_.empty() ? "request body" : where_,
                json_type_name(obj_));
}

std::string JsonFields::name(std::string_view key) const {
  return where_.empty() ? std::string(key) : where_ + "." + std::string(key);
}

const Json* JsonFields::get(std::string_view key) {
  read_.insert(std::string(key));
  auto it = obj_.find(std::string(key));
  return it == obj_.end() || it->is_null() ? nullptr : &*it;
}

bool JsonFields::has(std::string_view key) {
  return get(key) != nullptr;
}

std::optional<std::string> JsonFields::string(std::string_view key) {
  const Json* v = get(key);
  if (!v) return std::nullopt;
  if (!v->is_string()) bad_request(name(key), "{}: expected a string, got {}", name(key), json_type_name(*v));
  return v->get<std::string>();
}

std::optional<bool> JsonFields::boolean(std::string_view key) {
  const Json* v = get(key);
  if (!v) return std::nullopt;
  if (!v->is_boolean())
    bad_request(name(key), "{}: expected a boolean, got {}", name(key), json_type_name(*v));
  return v->get<bool>();
}

std::optional<int64_t> JsonFields::integer(std::string_view key, int64_t min, int64_t max) {
  const Json* v = get(key);
  if (!v) return std::nullopt;
  int64_t x = 0;
  if (v->is_number_unsigned()) {
    const uint64_t u = v->get<uint64_t>();
    if (u > uint64_t(max)) bad_request(name(key), "{}: {} is more than the maximum of {}", name(key), u, max);
    x = int64_t(u);
  } else if (v->is_number_integer()) {
    x = v->get<int64_t>();
  } else if (v->is_number_float() && std::isfinite(v->get<double>()) &&
             v->get<double>() == std::floor(v->get<double>()) && std::abs(v->get<double>()) < 9.0e15) {
    x = int64_t(v->get<double>());  // 16.0 is an integer to JavaScript clients
  } else {
    bad_request(name(key), "{}: expected an integer, got {}", name(key),
                v->is_number() ? v->dump() : std::string(json_type_name(*v)));
  }
  if (x < min || x > max) bad_request(name(key), "{}: {} is outside [{}, {}]", name(key), x, min, max);
  return x;
}

std::optional<double> JsonFields::number(std::string_view key, double min, double max) {
  const Json* v = get(key);
  if (!v) return std::nullopt;
  if (!v->is_number()) bad_request(name(key), "{}: expected a number, got {}", name(key), json_type_name(*v));
  const double x = v->get<double>();
  if (!std::isfinite(x) || x < min || x > max)
    bad_request(name(key), "{}: {} is outside [{}, {}]", name(key), v->dump(), min, max);
  return x;
}

void JsonFields::ignore(std::initializer_list<std::string_view> keys) {
  for (auto k : keys) read_.insert(std::string(k));
}

void JsonFields::reject_unknown() const {
  for (auto it = obj_.begin(); it != obj_.end(); ++it)
    if (!read_.count(it.key()))
      bad_request(name(it.key()), "Unrecognized request argument supplied: {}", name(it.key()));
}

}  // namespace orchid::server
