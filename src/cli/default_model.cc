#include "cli/default_model.h"

#include <cstdlib>
#include <filesystem>
#include <system_error>
#include <vector>

#include "core/error.h"

namespace orchid::cli {

namespace fs = std::filesystem;

std::string default_model_dir() {
  std::error_code ec;
  if (const char* env = std::getenv("ORCHID_DEFAULT_MODEL"); env != nullptr && *env != '\0') {
    if (!fs::is_directory(env, ec))
      fail("no MODEL given, and ORCHID_DEFAULT_MODEL={} is not a directory", env);
    return env;
  }
  std::vector<fs::path> tried;
  // The binary lives at build/<preset>/src/cli/orchid; the repository root is four levels up.
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) tried.push_back(exe.parent_path() / ".." / ".." / ".." / ".." / "models" / kDefaultModelName);
  tried.push_back(fs::path(ORCHID_SOURCE_DIR) / "models" / kDefaultModelName);
  for (const auto& p : tried)
    if (fs::is_regular_file(p / "config.json", ec)) return fs::weakly_canonical(p, ec).string();
  std::string where;
  for (const auto& p : tried) where += (where.empty() ? "" : ", ") + p.lexically_normal().string();
  fail(
      "no MODEL given and the default model ({}) is not at {}: give a model directory or synthetic:tiny, or "
      "set ORCHID_DEFAULT_MODEL",
      kDefaultModelName, where);
}

std::string model_or_default(const std::string& model) {
  return model.empty() ? default_model_dir() : model;
}

}  // namespace orchid::cli
