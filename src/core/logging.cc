#include "core/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include "core/error.h"

namespace orchid {

void init_logging(std::string_view level) {
  auto lvl = spdlog::level::from_str(std::string(level));
  if (lvl == spdlog::level::off && level != "off") fail("unknown log level '{}'", level);
  // Logs go to stderr: stdout carries results (ids, tables, JSON) that scripts parse.
  static const bool once = [] {
    spdlog::set_default_logger(spdlog::stderr_color_mt("orchid"));
    return true;
  }();
  (void)once;
  spdlog::set_level(lvl);
  spdlog::set_pattern("[%H:%M:%S.%e] [%^%l%$] %v");
}

}  // namespace orchid
