// A file compiled into the binary (cmake/embed_files.cmake writes the table at build time).
#pragma once

#include <string_view>

namespace orchid::server {

struct EmbeddedFile {
  std::string_view name;    // relative to the directory it was embedded from, e.g. "chat.js"
  std::string_view bytes;   // the whole file
  std::string_view sha256;  // hex digest of `bytes`, computed at build time
};

}  // namespace orchid::server
