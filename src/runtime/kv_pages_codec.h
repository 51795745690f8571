// KvPages (runtime/backend.h) as bytes, for handing K/V to an instance in another process: a magic word and
// version, the layout name, the counts, the token ids, both pools' page bytes, then where the bytes lie
// instead when they are shared in place (runtime/kv_share.h). Decoding checks every
// length against what is left, so a truncated or garbled body is an orchid::Error, never a bad read.
#pragma once

#include <string>
#include <string_view>

#include "runtime/backend.h"

namespace orchid::runtime {

std::string encode_kv_pages(const KvPages& kv);
KvPages decode_kv_pages(std::string_view bytes);

}  // namespace orchid::runtime
