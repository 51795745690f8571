// Errors. Two kinds, kept apart on purpose:
//  - orchid::Error: a user mistake (bad flag, bad config, bad checkpoint, bad request). The message names the
//    file, tensor, field or parameter; callers show it as is.
//  - ORCHID_CHECK: a programming error. It throws InternalError carrying file:line, so a server can answer
//  500
//    and keep running, and a CLI stops with a clear trace.
#pragma once

#include <fmt/format.h>

#include "core/check_failed.h"

#include <stdexcept>
#include <string>

namespace orchid {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

class InternalError : public std::logic_error {
 public:
  explicit InternalError(const std::string& what) : std::logic_error(what) {}
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace orchid

#define ORCHID_CHECK(cond, ...)                                                         \
  do {                                                                                  \
    if (!(cond)) [[unlikely]]                                                           \
      ::orchid::check_failed(__FILE__, __LINE__, #cond, ::fmt::format("" __VA_ARGS__)); \
  } while (0)
