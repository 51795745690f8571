#include "runtime/kv_cache_dtype.h"

#include "core/error.h"

namespace orchid::runtime {

KvCacheDtype parse_kv_cache_dtype(std::string_view s) {
  if (s == "auto" || s == "bf16") return KvCacheDtype::kBf16;
  if (s == "fp8" || s == "fp8_e4m3") return KvCacheDtype::kFp8E4M3;
  fail("--kv-cache-dtype must be auto, bf16, fp8 or fp8_e4m3, got '{}'", s);
}

std::string_view kv_cache_dtype_name(KvCacheDtype d) {
  return d == KvCacheDtype::kFp8E4M3 ? "fp8_e4m3" : "bf16";
}

}  // namespace orchid::runtime
