#include "runtime/cpu/cpu_eagle3.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "runtime/cpu/cpu_blocks.h"
#include "runtime/sampler.h"

namespace orchid::runtime::cpu {

CpuEagle3Head::CpuEagle3Head(model::Eagle3Head head, const MatrixRef& target_embedding,
                             const KvCacheSpec& spec)
    : head_(std::move(head)), spec_(spec) {
  const auto& c = head_.config;
  const auto& ck = head_.checkpoint;
  const auto& n = head_.names;
  auto m = [&](const std::string& name) { return MatrixRef::dense(ck.get(name)); };
  embedding_ = c.has_embedding ? m(n.embedding) : target_embedding;
  fc_ = m(n.fc);
  q_ = m(n.q);
  k_ = m(n.k);
  v_ = m(n.v);
  o_ = m(n.o);
  gate_ = m(n.gate);
  up_ = m(n.up);
  down_ = m(n.down);
  lm_head_ = m(n.lm_head);
  if (c.norm_before_fc) input_norm_fc_ = to_f32(ck.get(n.input_norm_fc));
  input_layernorm_ = to_f32(ck.get(n.input_layernorm));
  hidden_norm_ = to_f32(ck.get(n.hidden_norm));
  post_norm_ = to_f32(ck.get(n.post_norm));
  final_norm_ = to_f32(ck.get(n.final_norm));
  attn_.num_heads = c.num_heads;
  attn_.num_kv_heads = c.num_kv_heads;
  attn_.head_dim = c.head_dim;
  rope_ = model::rope_tables(c.rope, c.head_dim);
  const size_t pool = size_t(spec_.num_full_pages) * size_t(spec_.page_size) * size_t(c.kv_dim());
  k_pool_.assign(pool, 0.0f);
  v_pool_.assign(pool, 0.0f);
}

float* CpuEagle3Head::kv_row(bool key, int32_t page, int32_t slot) {
  ORCHID_CHECK(page >= 0 && page < spec_.num_full_pages, "EAGLE-3 head: page {} outside the pool", page);
  auto& pool = key ? k_pool_ : v_pool_;
  return pool.data() +
         (size_t(page) * size_t(spec_.page_size) + size_t(slot)) * size_t(head_.config.kv_dim());
}

std::vector<float> CpuEagle3Head::combine(const float* aux, int64_t n) const {
  const auto& c = head_.config;
  const int64_t W = aux_width();
  std::vector<float> g(size_t(n * c.hidden_size)), normed;
  if (c.norm_before_fc) {
    normed.resize(size_t(n * W));
    rms_norm(aux, n, W, input_norm_fc_.data(), float(c.rms_norm_eps), normed.data());
    aux = normed.data();
  }
  linear(aux, n, fc_, nullptr, g.data());
  return g;
}

std::vector<float> CpuEagle3Head::layer(const std::vector<float>& g, std::span<const int32_t> tokens,
                                        int32_t first_pos, std::span<const int32_t> table,
                                        int32_t paged_end) {
  const auto& c = head_.config;
  const int64_t n = int64_t(tokens.size()), H = c.hidden_size, I = c.intermediate_size, qd = c.q_dim(),
                kvd = c.kv_dim();
  const float eps = float(c.rms_norm_eps);
  ORCHID_CHECK(int64_t(g.size()) == n * H, "EAGLE-3 head: {} rows of g for {} tokens", g.size() / size_t(H),
               n);
  // x = [RMSNorm(embed(token)), RMSNorm(g)], embedding first.
  std::vector<float> emb(size_t(n * H)), e(size_t(n * H)), hn(size_t(n * H)), x(size_t(n * 2 * H));
  for (int64_t t = 0; t < n; ++t)
    embedding_.rows_f32(tokens[size_t(t)], tokens[size_t(t)] + 1, emb.data() + t * H);
  rms_norm(emb.data(), n, H, input_layernorm_.data(), eps, e.data());
  rms_norm(g.data(), n, H, hidden_norm_.data(), eps, hn.data());
  for (int64_t t = 0; t < n; ++t) {
    std::copy_n(e.data() + t * H, H, x.data() + t * 2 * H);
    std::copy_n(hn.data() + t * H, H, x.data() + t * 2 * H + H);
  }
  std::vector<float> q(size_t(n * qd)), k(size_t(n * kvd)), v(size_t(n * kvd));
  linear(x.data(), n, q_, nullptr, q.data());
  linear(x.data(), n, k_, nullptr, k.data());
  linear(x.data(), n, v_, nullptr, v.data());
  std::vector<int32_t> positions(static_cast<size_t>(n));
  for (int64_t t = 0; t < n; ++t) positions[size_t(t)] = first_pos + int32_t(t);
  apply_rope(q.data(), n, c.num_heads, c.head_dim, positions, rope_);
  apply_rope(k.data(), n, c.num_kv_heads, c.head_dim, positions, rope_);

  // K/V rows: paged below paged_end, scratch from there (positions scratch_begin_..).
  auto row = [&](bool key, int64_t pos) -> float* {
    if (pos < paged_end) {
      const int64_t p = pos / spec_.page_size;
      ORCHID_CHECK(p < int64_t(table.size()) && table[size_t(p)] != kNoPage,
                   "EAGLE-3 head: position {} has no page", pos);
      return kv_row(key, table[size_t(p)], int32_t(pos % spec_.page_size));
    }
    auto& s = key ? scratch_k_ : scratch_v_;
    const size_t at = size_t(pos - scratch_begin_) * size_t(kvd);
    ORCHID_CHECK(pos >= scratch_begin_ && at + size_t(kvd) <= s.size(), "EAGLE-3 head: scratch position {}",
                 pos);
    return s.data() + at;
  };
  for (int64_t t = 0; t < n; ++t) {
    std::copy_n(k.data() + t * kvd, kvd, row(true, first_pos + t));
    std::copy_n(v.data() + t * kvd, kvd, row(false, first_pos + t));
  }
  const int64_t last = first_pos + n - 1;
  GatheredKv kv;
  kv.k.resize(size_t(last + 1));
  kv.v.resize(size_t(last + 1));
  for (int64_t pos = 0; pos <= last; ++pos) {
    kv.k[size_t(pos)] = row(true, pos);
    kv.v[size_t(pos)] = row(false, pos);
  }
  const std::vector<float> no_sinks(size_t(c.num_heads), -std::numeric_limits<float>::infinity());
  std::vector<float> attn(size_t(n * qd)), r(size_t(n * H));
  sink_attention(q.data(), n, first_pos, attn_, 0, no_sinks.data(), kv, attn.data());
  linear(attn.data(), n, o_, nullptr, r.data());
  const std::vector<float>& residual = c.norm_before_residual ? hn : g;
  for (size_t i = 0; i < r.size(); ++i) r[i] += residual[i];

  std::vector<float> h(size_t(n * H)), gate(size_t(n * I)), up(size_t(n * I)), mlp(size_t(n * H));
  rms_norm(r.data(), n, H, post_norm_.data(), eps, h.data());
  linear(h.data(), n, gate_, nullptr, gate.data());
  linear(h.data(), n, up_, nullptr, up.data());
  for (size_t i = 0; i < gate.size(); ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
  linear(gate.data(), n, down_, nullptr, mlp.data());
  for (size_t i = 0; i < r.size(); ++i) r[i] += mlp[i];
  return r;  // pre: before the final norm
}

std::vector<float> CpuEagle3Head::catch_up(const std::vector<float>& g, std::span<const int32_t> next_tokens,
                                           int32_t first_pos, std::span<const int32_t> table) {
  const int32_t end = first_pos + int32_t(next_tokens.size());
  return layer(g, next_tokens, first_pos, table, end);
}

int32_t CpuEagle3Head::draw(const float* pre, const SamplingParams& params, int32_t sample_index) const {
  const auto& c = head_.config;
  std::vector<float> normed(size_t(c.hidden_size)), logits(size_t(c.draft_vocab_size));
  rms_norm(pre, 1, c.hidden_size, final_norm_.data(), float(c.rms_norm_eps), normed.data());
  linear(normed.data(), 1, lm_head_, nullptr, logits.data());
  // The head's distribution over the target's vocabulary: tokens outside the draft vocabulary are -inf.
  std::vector<float> row(size_t(c.vocab_size), -std::numeric_limits<float>::infinity());
  for (size_t j = 0; j < logits.size(); ++j) row[size_t(head_.draft_to_target[j])] = logits[j];
  SampleInput in;
  in.logits = row;
  in.params = &params;
  in.sample_index = sample_index;
  return sample_token(in).token;
}

std::vector<int32_t> CpuEagle3Head::draft(std::vector<float> pre, int32_t pos, int32_t k,
                                          std::span<const int32_t> table, const SamplingParams& params,
                                          int32_t sample_index) {
  const auto& c = head_.config;
  std::vector<int32_t> out;
  if (k <= 0) return out;
  out.push_back(draw(pre.data(), params, sample_index));
  // Steps 2..k at positions pos + 1.. (no page reserved there yet: scratch K/V).
  scratch_begin_ = pos + 1;
  scratch_k_.assign(size_t(std::max(0, k - 1)) * size_t(c.kv_dim()), 0.0f);
  scratch_v_.assign(scratch_k_.size(), 0.0f);
  for (int32_t j = 1; j < k && pos + j < c.max_position_embeddings; ++j) {
    const int32_t token = out.back();
    pre = layer(pre, std::span<const int32_t>(&token, 1), pos + j, table, scratch_begin_);
    out.push_back(draw(pre.data(), params, sample_index + j));
  }
  return out;
}

}  // namespace orchid::runtime::cpu
