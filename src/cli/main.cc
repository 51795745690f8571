// orchid: the command-line entry point. Subcommands register themselves (commands.h); errors are reported
// here: user mistakes (orchid::Error, bad flags) exit 2 with the message, internal errors exit 70.
#include <cstdio>
#include <exception>
#include <string>

#include "cli/commands.h"
#include "core/error.h"
#include "core/logging.h"

int main(int argc, char** argv) {
  CLI::App app{"orchid: gpt-oss inference engine and OpenAI-compatible server", "orchid"};
  app.require_subcommand(1);
  app.fallthrough();  // global flags (--log-level) may follow the subcommand
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error, off")->capture_default_str();
  app.parse_complete_callback([&] { orchid::init_logging(log_level); });

  orchid::cli::add_version_command(app);
  orchid::cli::add_forward_command(app);
  orchid::cli::add_generate_command(app);
  orchid::cli::add_inspect_command(app);
  orchid::cli::add_synth_command(app);
  orchid::cli::add_bench_command(app);
  orchid::cli::add_layer_command(app);
  orchid::cli::add_tokenize_command(app);
  orchid::cli::add_serve_command(app);
  orchid::cli::add_render_command(app);

  auto is_command = [&](const std::string& name) {
    for (const auto* sub : app.get_subcommands({}))
      if (sub->get_name() == name) return true;
    return false;
  };
  if (argc > 1 && argv[1][0] != '-' && !is_command(argv[1])) {
    std::string names;
    for (const auto* sub : app.get_subcommands({})) names += (names.empty() ? "" : ", ") + sub->get_name();
    std::fprintf(stderr, "orchid: error: unknown command '%s' (commands: %s)\n", argv[1], names.c_str());
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const orchid::Error& e) {
    std::fprintf(stderr, "orchid: error: %s\n", e.what());
    return 2;
  } catch (const orchid::InternalError& e) {
    std::fprintf(stderr, "orchid: %s\n", e.what());
    return 70;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "orchid: unexpected error: %s\n", e.what());
    return 70;
  }
  return 0;
}
