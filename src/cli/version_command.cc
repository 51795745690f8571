#include <cstdio>

#include "cli/commands.h"

namespace orchid::cli {

void add_version_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("version", "Print orchid's version");
  cmd->callback([] { std::printf("orchid 0.1.0\n"); });
}

}  // namespace orchid::cli
