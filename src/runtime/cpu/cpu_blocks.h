// The gpt-oss blocks in plain fp32 — the reference every other backend is tested against. One function per
// block; each works on all new tokens of a step at once.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/config.h"
#include "model/rope.h"
#include "runtime/cpu/cpu_weights.h"

namespace orchid::runtime::cpu {

// out[t] = x[t] * rsqrt(mean(x[t]^2) + eps) * gamma
void rms_norm(const float* x, int64_t n, int64_t dim, const float* gamma, float eps, float* out);

// Rotates `heads` heads of head_dim at each token's position (half-split pairs (j, j + head_dim/2)).
void apply_rope(float* x, int64_t n, int64_t heads, int64_t head_dim, std::span<const int32_t> positions,
                const model::RopeTables& rope);

// Where each key of a sequence lives: K/V rows of kv_dim floats for position t.
struct KvReader {
  virtual ~KvReader() = default;
  virtual const float* key(int64_t t) const = 0;
  virtual const float* value(int64_t t) const = 0;
};
// The rows gathered by position beforehand (paged pools, a draft head's scratch rows).
struct GatheredKv final : KvReader {
  std::vector<const float*> k, v;  // per position
  const float* key(int64_t t) const override { return k[size_t(t)]; }
  const float* value(int64_t t) const override { return v[size_t(t)]; }
};

// Sink attention for one sequence's new tokens (queries at positions start_pos..start_pos+n-1); q is
// [n, Hq, d], out is [n, Hq, d]. Keys 0..p (or the last `window` of them) come from `kv`.
void sink_attention(const float* q, int64_t n, int64_t start_pos, const model::ModelConfig& c, int64_t window,
                    const float* sinks, const KvReader& kv, float* out);

// Router + top-k + softmax over the selected + clamped SwiGLU experts + weighted sum: out[t] = MoE(h[t]).
// `chosen` (optional) receives the k experts of each token, [n, k], in rank order. With an expert range
// [expert_begin, expert_end) (an expert-parallel rank's experts) only those experts run and out holds their
// part of the weighted sum; the parts of all ranks add up to the whole.
void moe(const float* h, int64_t n, const model::ModelConfig& c, const LayerWeights& w, float* out,
         std::vector<int32_t>* chosen_out = nullptr, int64_t expert_begin = 0, int64_t expert_end = -1);

// The expert activation on one row of the gate_up output (interleaved gate/up) -> z[I].
void clamped_swiglu(const float* gate_up, int64_t inter, float alpha, float limit, float* z);

}  // namespace orchid::runtime::cpu
