// Parsing of user-supplied numbers and lists, with errors that name the parameter.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace orchid {

// "1,2, 3" -> {1,2,3}. `what` names the flag or field in the error message.
std::vector<int64_t> parse_int_list(std::string_view text, std::string_view what);
int64_t parse_int(std::string_view text, std::string_view what);
double parse_double(std::string_view text, std::string_view what);
std::string read_text_file(const std::string& path, std::string_view what);

}  // namespace orchid
