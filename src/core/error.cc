#include "core/error.h"

namespace orchid {

void check_failed(const char* file, int line, const char* cond, const std::string& msg) {
  std::string what = fmt::format("internal error at {}:{}: check `{}` failed", file, line, cond);
  if (!msg.empty()) what += ": " + msg;
  throw InternalError(what);
}

}  // namespace orchid
