#include "core/logging.h"

#include "core/error.h"

namespace orchid {

void init_logging(std::string_view level) {
  auto lvl = spdlog::level::from_str(std::string(level));
  if (lvl == spdlog::level::off && level != "off") fail("unknown log level '{}'", level);
  spdlog::set_level(lvl);
  spdlog::set_pattern("[%H:%M:%S.%e] [%^%l%$] %v");
}

}  // namespace orchid
