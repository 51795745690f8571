// libFuzzer: arbitrary bytes as the start of a .safetensors file. The parser must either accept (and then
// every span it returns lies inside the file and spans do not overlap) or throw orchid::Error.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/error.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The first byte, when present, lets the fuzzer claim a larger file than it provides (truncation cases).
  uint64_t extra = size > 0 ? data[0] : 0;
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const uint64_t file_size = size + (extra > 200 ? extra : 0);
  try {
    auto h = orchid::io::parse_safetensors(bytes, file_size, "fuzz");
    const uint64_t data_size = file_size - h.data_offset;
    uint64_t prev_end = 0;
    for (const auto& t : h.tensors) {
      if (t.end > data_size || t.begin > t.end) __builtin_trap();
      if (t.end > t.begin && t.begin < prev_end) __builtin_trap();
      if (t.end > t.begin) prev_end = t.end;
    }
  } catch (const orchid::Error&) {
  }
  return 0;
}
