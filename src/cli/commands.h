// Each `orchid` subcommand lives in its own <name>_command.cc and registers itself here.
#pragma once

#include <CLI/CLI.hpp>

namespace orchid::cli {

// Registration functions: add the subcommand, its flags and its callback to `app`.
void add_version_command(CLI::App& app);
void add_forward_command(CLI::App& app);
void add_generate_command(CLI::App& app);
void add_inspect_command(CLI::App& app);
void add_synth_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_layer_command(CLI::App& app);
void add_tokenize_command(CLI::App& app);  // tokenize, detokenize
void add_serve_command(CLI::App& app);
void add_render_command(CLI::App& app);

}  // namespace orchid::cli
