// Request bodies: JSON parsed with limits (nesting depth, UTF-8), and typed access to an object's fields
// that names the parameter in every error and rejects the fields nobody read ("Unrecognized request
// argument supplied"), as the OpenAI API does.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include <nlohmann/json.hpp>

namespace orchid::server {

// Key order is kept: tool parameter schemas are rendered in the order the client wrote them.
using Json = nlohmann::ordered_json;

inline constexpr int kMaxJsonDepth = 64;

// Throws ApiError 400 for invalid JSON, invalid UTF-8 or nesting deeper than kMaxJsonDepth.
Json parse_json_body(std::string_view body);

// Compact JSON text; bytes that are not UTF-8 (a token's raw piece) become U+FFFD instead of throwing.
std::string json_text(const Json& value);

// The JSON type name a client would understand ("string", "integer", "object", ...).
std::string_view json_type_name(const Json& v);

class JsonFields {
 public:
  // `where` prefixes parameter names in errors ("" for the request itself, "tools[0].function" ...).
  // Throws ApiError 400 unless `object` is an object.
  JsonFields(const Json& object, std::string where);

  // The field, or nullptr if absent or null; marks it as read.
  const Json* get(std::string_view key);
  bool has(std::string_view key);  // present and not null; marks it as read
  std::optional<std::string> string(std::string_view key);
  std::optional<bool> boolean(std::string_view key);
  std::optional<int64_t> integer(std::string_view key, int64_t min, int64_t max);
  std::optional<double> number(std::string_view key, double min, double max);
  // Accepted and ignored (the OpenAI API has it; orchid has nothing to do with it).
  void ignore(std::initializer_list<std::string_view> keys);
  // Throws ApiError 400 naming the first field that was never read.
  void reject_unknown() const;

  std::string name(std::string_view key) const;  // "where.key"
  const Json& object() const { return obj_; }

 private:
  const Json& obj_;
  std::string where_;
  std::unordered_set<std::string> read_;
};

}  // namespace orchid::server
