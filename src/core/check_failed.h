// The fmt-free part of core/error.h, for code compiled by nvcc (which cannot parse this fmt's constexpr
// code).
#pragma once

#include <string>

namespace orchid {

// Throws orchid::InternalError("internal error at file:line: check `cond` failed: msg").
[[noreturn]] void check_failed(const char* file, int line, const char* cond, const std::string& msg);

}  // namespace orchid
