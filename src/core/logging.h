// Logging goes through spdlog (header-only use, so the binary carries no spdlog .so dependency).
#pragma once

#include <spdlog/spdlog.h>

#include <string_view>

namespace orchid {

// Level names as spdlog spells them ("trace" .. "off"); bad names are a user error.
void init_logging(std::string_view level);

}  // namespace orchid
