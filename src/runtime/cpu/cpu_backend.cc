#include "runtime/cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "runtime/cpu/cpu_blocks.h"
#include "runtime/sampler.h"

namespace orchid::runtime::cpu {

CpuBackend::CpuBackend(model::LoadedModel model, const CpuBackendOptions& opts)
    : model_(std::move(model)), w_(CpuWeights::resolve(model_)) {
  const auto& c = model_.config;
  rope_ = model::rope_tables(c.rope, c.head_dim);
  if (opts.page_size <= 0) fail("--block-size must be positive, got {}", opts.page_size);
  spec_.page_size = opts.page_size;
  spec_.sliding_window = c.num_sliding_layers() > 0 ? int32_t(c.sliding_window) : 0;
  const int32_t default_pages = int32_t((opts.max_tokens + opts.page_size - 1) / opts.page_size);
  spec_.num_full_pages = opts.num_full_pages > 0 ? opts.num_full_pages : default_pages;
  spec_.num_sliding_pages = opts.num_sliding_pages > 0 ? opts.num_sliding_pages : default_pages;
  int64_t full = 0, sliding = 0;
  for (int64_t l = 0; l < c.num_layers; ++l) layer_slot_.push_back(c.is_sliding(l) ? sliding++ : full++);
  const size_t row = size_t(c.kv_dim()) * size_t(spec_.page_size);
  full_k_.assign(size_t(full) * size_t(spec_.num_full_pages) * row, 0.0f);
  full_v_.assign(full_k_.size(), 0.0f);
  sliding_k_.assign(size_t(sliding) * size_t(spec_.num_sliding_pages) * row, 0.0f);
  sliding_v_.assign(sliding_k_.size(), 0.0f);
}

std::unique_ptr<CpuBackend> CpuBackend::create(const std::string& model_arg, const CpuBackendOptions& opts) {
  return std::make_unique<CpuBackend>(model::load_model(model_arg), opts);
}

float* CpuBackend::kv_row(bool key, int64_t layer, int32_t page, int64_t slot) {
  const auto& c = model_.config;
  const bool sliding = c.is_sliding(layer);
  const int64_t pages = sliding ? spec_.num_sliding_pages : spec_.num_full_pages;
  auto& pool = sliding ? (key ? sliding_k_ : sliding_v_) : (key ? full_k_ : full_v_);
  const size_t idx =
      ((size_t(layer_slot_[size_t(layer)]) * size_t(pages) + size_t(page)) * size_t(spec_.page_size) +
       size_t(slot)) *
      size_t(c.kv_dim());
  return pool.data() + idx;
}

void CpuBackend::validate(const StepBatch& b) const {
  const auto& c = model_.config;
  for (int32_t id : b.tokens)
    if (id < 0 || id >= c.vocab_size) fail("token id {} is outside the vocabulary [0, {})", id, c.vocab_size);
  int64_t covered = 0;
  for (const auto& s : b.seqs) {
    ORCHID_CHECK(s.num_tokens >= 0 && s.start_pos >= 0);
    ORCHID_CHECK(s.token_begin == covered, "sequence tokens must be back to back");
    covered += s.num_tokens;
    const int64_t end = int64_t(s.start_pos) + s.num_tokens;
    if (end > c.max_position_embeddings)
      fail("sequence of {} tokens exceeds the model's {} positions", end, c.max_position_embeddings);
    const int64_t need = (end + spec_.page_size - 1) / spec_.page_size;
    ORCHID_CHECK(s.num_full_pages >= need || c.num_full_layers() == 0, "full page table too short");
    ORCHID_CHECK(s.num_sliding_pages >= need || c.num_sliding_layers() == 0, "sliding page table too short");
    ORCHID_CHECK(size_t(s.full_table_begin) + size_t(s.num_full_pages) <= b.full_page_table.size());
    ORCHID_CHECK(size_t(s.sliding_table_begin) + size_t(s.num_sliding_pages) <= b.sliding_page_table.size());
    ORCHID_CHECK(!s.sample || (s.params_index >= 0 && size_t(s.params_index) < b.params.size()));
  }
  ORCHID_CHECK(covered == int64_t(b.tokens.size()), "tokens not covered by sequences");
  for (int32_t p : b.full_page_table)
    ORCHID_CHECK(p == kNoPage || (p >= 0 && p < spec_.num_full_pages), "page {}", p);
  for (int32_t p : b.sliding_page_table)
    ORCHID_CHECK(p == kNoPage || (p >= 0 && p < spec_.num_sliding_pages), "page {}", p);
}

namespace {
struct PagedKv final : KvReader {
  std::vector<const float*> k, v;  // per position
  const float* key(int64_t t) const override { return k[size_t(t)]; }
  const float* value(int64_t t) const override { return v[size_t(t)]; }
};
}  // namespace

void CpuBackend::layer_forward(int64_t l, const StepBatch& b, const std::vector<int32_t>& positions,
                               std::vector<float>& x, std::vector<int32_t>* topk) {
  const auto& c = model_.config;
  const auto& L = w_.layers[size_t(l)];
  const int64_t n = b.num_tokens(), H = c.hidden_size, qd = c.q_dim(), kvd = c.kv_dim();
  const bool sliding = c.is_sliding(l);
  const float eps = float(c.rms_norm_eps);

  std::vector<float> h(size_t(n * H)), q(size_t(n * qd)), k(size_t(n * kvd)), v(size_t(n * kvd));
  rms_norm(x.data(), n, H, L.input_norm.data(), eps, h.data());
  linear(h.data(), n, L.q, L.q_bias.data(), q.data());
  linear(h.data(), n, L.k, L.k_bias.data(), k.data());
  linear(h.data(), n, L.v, L.v_bias.data(), v.data());
  apply_rope(q.data(), n, c.num_heads, c.head_dim, positions, rope_);
  apply_rope(k.data(), n, c.num_kv_heads, c.head_dim, positions, rope_);

  // Write every new token's K/V first, so a prefill chunk's queries see the chunk's earlier keys.
  std::vector<float> attn(size_t(n * qd));
  for (const auto& s : b.seqs) {
    const int32_t* table = sliding ? b.sliding_page_table.data() + s.sliding_table_begin
                                   : b.full_page_table.data() + s.full_table_begin;
    auto page_of = [&](int64_t pos) {
      const int32_t page = table[pos / spec_.page_size];
      if (page == kNoPage)
        ORCHID_CHECK(false, "position {} of sequence {} has no page (layer {})", pos, s.seq_id, l);
      return page;
    };
    for (int64_t i = 0; i < s.num_tokens; ++i) {
      const int64_t t = s.token_begin + i, pos = s.start_pos + i;
      const int32_t page = page_of(pos);
      std::copy_n(k.data() + t * kvd, kvd, kv_row(true, l, page, pos % spec_.page_size));
      std::copy_n(v.data() + t * kvd, kvd, kv_row(false, l, page, pos % spec_.page_size));
    }
    if (s.num_tokens == 0) continue;
    const int64_t window = sliding ? c.sliding_window : 0;
    const int64_t last = s.start_pos + s.num_tokens - 1;
    const int64_t first = window > 0 ? std::max<int64_t>(0, s.start_pos - window + 1) : 0;
    PagedKv kv;
    kv.k.assign(size_t(last + 1), nullptr);
    kv.v.assign(size_t(last + 1), nullptr);
    for (int64_t pos = first; pos <= last; ++pos) {
      const int32_t page = page_of(pos);
      kv.k[size_t(pos)] = kv_row(true, l, page, pos % spec_.page_size);
      kv.v[size_t(pos)] = kv_row(false, l, page, pos % spec_.page_size);
    }
    sink_attention(q.data() + int64_t(s.token_begin) * qd, s.num_tokens, s.start_pos, c, window,
                   L.sinks.data(), kv, attn.data() + int64_t(s.token_begin) * qd);
  }
  std::vector<float> o(size_t(n * H));
  linear(attn.data(), n, L.o, L.o_bias.data(), o.data());
  for (size_t i = 0; i < x.size(); ++i) x[i] += o[i];

  rms_norm(x.data(), n, H, L.post_norm.data(), eps, h.data());
  moe(h.data(), n, c, L, o.data(), topk);
  for (size_t i = 0; i < x.size(); ++i) x[i] += o[i];
}

std::vector<float> CpuBackend::run_layer(int64_t layer, const std::vector<float>& x, int64_t n,
                                         std::vector<int32_t>* topk) {
  const auto& c = model_.config;
  if (layer < 0 || layer >= c.num_layers) fail("layer {} is outside [0, {})", layer, c.num_layers);
  ORCHID_CHECK(int64_t(x.size()) == n * c.hidden_size);
  StepBatch b = single_sequence_batch(spec_, int32_t(n));
  validate(b);
  std::vector<int32_t> positions(static_cast<size_t>(n));
  for (int64_t t = 0; t < n; ++t) positions[size_t(t)] = int32_t(t);
  std::vector<float> y = x;
  layer_forward(layer, b, positions, y, topk);
  return y;
}

StepOutput CpuBackend::forward(const StepBatch& b) {
  validate(b);
  const auto& c = model_.config;
  const int64_t n = b.num_tokens(), H = c.hidden_size, V = c.vocab_size;
  StepOutput out;
  std::vector<int32_t> positions(static_cast<size_t>(n));
  for (const auto& s : b.seqs)
    for (int32_t i = 0; i < s.num_tokens; ++i) positions[size_t(s.token_begin + i)] = s.start_pos + i;

  std::vector<float> x(size_t(n * H));
  for (int64_t t = 0; t < n; ++t)
    w_.embedding.rows_f32(b.tokens[size_t(t)], b.tokens[size_t(t)] + 1, x.data() + t * H);
  for (int64_t l = 0; l < c.num_layers; ++l) layer_forward(l, b, positions, x);

  // Final norm and lm_head only on the rows that need logits.
  std::vector<int64_t> rows;
  if (b.logits == LogitsMode::kAll) {
    for (int64_t t = 0; t < n; ++t) rows.push_back(t);
  } else {
    for (const auto& s : b.seqs)
      if (s.sample && s.num_tokens > 0) rows.push_back(s.token_begin + s.num_tokens - 1);
  }
  std::vector<float> xr(rows.size() * size_t(H)), normed(rows.size() * size_t(H)),
      logits(rows.size() * size_t(V));
  for (size_t r = 0; r < rows.size(); ++r) std::copy_n(x.data() + rows[r] * H, H, xr.data() + r * size_t(H));
  rms_norm(xr.data(), int64_t(rows.size()), H, w_.final_norm.data(), float(c.rms_norm_eps), normed.data());
  linear(normed.data(), int64_t(rows.size()), w_.lm_head, nullptr, logits.data());

  for (const auto& s : b.seqs) {
    if (!s.sample) continue;
    ORCHID_CHECK(s.num_tokens > 0, "cannot sample a sequence with no new tokens");
    const int64_t row_token = s.token_begin + s.num_tokens - 1;
    const size_t r = size_t(std::find(rows.begin(), rows.end(), row_token) - rows.begin());
    const std::span<const float> row(logits.data() + r * size_t(V), size_t(V));
    out.samples.push_back(sample_token(step_sample_input(b, s, row)));
  }
  if (b.logits == LogitsMode::kAll) {
    out.logits = std::move(logits);
    out.logits_rows = n;
  } else if (b.logits == LogitsMode::kSampled) {
    out.logits = std::move(logits);
    out.logits_rows = int64_t(rows.size());
  }
  return out;
}

}  // namespace orchid::runtime::cpu
