// The model a command runs when none is given: orchid's trained tiny model (models/orchid-tiny, a gpt-oss at
// width 256 that speaks Harmony; not gpt-oss), found next to the binary in the build tree or in the source
// tree.
#pragma once

#include <string>

namespace orchid::cli {

inline constexpr const char* kDefaultModelName = "orchid-tiny";

// The directory of the default model: $ORCHID_DEFAULT_MODEL when set, else models/orchid-tiny of the tree
// this binary was built in. Fails with where it looked when there is none.
std::string default_model_dir();

// `model` unless empty, then default_model_dir().
std::string model_or_default(const std::string& model);

}  // namespace orchid::cli
