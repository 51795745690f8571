// The precision of the KV cache's pages (--kv-cache-dtype). BF16 is the default. FP8 stores K and V as
// e4m3 (1-4-3, bias 7, max 448, saturating, round to nearest even) of x / scale, with one fp32 scale per
// (layer, KV head) for K and one for V, fixed for the life of the pools: a scale that moved would change
// what pages written earlier mean. With no scales in the checkpoint every scale is 1.0 (vLLM's default).
// Half the bytes a cached token costs, so decode at long context reads half as much and twice the tokens
// fit. A layer whose pages are fp32 (the CUDA backend's precise layer 0) keeps them in fp32 either way.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace orchid::runtime {

enum class KvCacheDtype : uint8_t { kBf16, kFp8E4M3 };

// "auto" and "bf16" give kBf16; "fp8" and "fp8_e4m3" give kFp8E4M3; anything else throws orchid::Error
// naming --kv-cache-dtype and the accepted values.
KvCacheDtype parse_kv_cache_dtype(std::string_view s);
std::string_view kv_cache_dtype_name(KvCacheDtype d);  // "bf16" | "fp8_e4m3"
// Bytes of one K or V element in a page of that precision.
inline int kv_element_bytes(KvCacheDtype d) {
  return d == KvCacheDtype::kFp8E4M3 ? 1 : 2;
}

}  // namespace orchid::runtime
