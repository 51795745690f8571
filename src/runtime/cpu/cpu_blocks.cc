#include "runtime/cpu/cpu_blocks.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/thread_pool.h"

namespace orchid::runtime::cpu {

void rms_norm(const float* x, int64_t n, int64_t dim, const float* gamma, float eps, float* out) {
  for (int64_t t = 0; t < n; ++t) {
    const float* xt = x + t * dim;
    double ss = 0;
    for (int64_t i = 0; i < dim; ++i) ss += double(xt[i]) * xt[i];
    const float r = float(1.0 / std::sqrt(ss / double(dim) + eps));
    for (int64_t i = 0; i < dim; ++i) out[t * dim + i] = xt[i] * r * gamma[i];
  }
}

void apply_rope(float* x, int64_t n, int64_t heads, int64_t head_dim, std::span<const int32_t> positions,
                const model::RopeTables& rope) {
  const int64_t half = head_dim / 2;
  std::vector<float> cs(static_cast<size_t>(half)), sn(static_cast<size_t>(half));
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t j = 0; j < half; ++j)
      model::rope_cos_sin(rope, positions[size_t(t)], j, &cs[size_t(j)], &sn[size_t(j)]);
    for (int64_t h = 0; h < heads; ++h) {
      float* v = x + (t * heads + h) * head_dim;
      for (int64_t j = 0; j < half; ++j) {
        const float a = v[j], b = v[j + half];
        v[j] = a * cs[size_t(j)] - b * sn[size_t(j)];
        v[j + half] = b * cs[size_t(j)] + a * sn[size_t(j)];
      }
    }
  }
}

void sink_attention(const float* q, int64_t n, int64_t start_pos, const model::ModelConfig& c, int64_t window,
                    const float* sinks, const KvReader& kv, float* out) {
  const int64_t Hq = c.num_heads, d = c.head_dim, group = c.num_heads / c.num_kv_heads;
  const float scale = 1.0f / std::sqrt(float(d));
  ThreadPool::global().parallel_for(size_t(n * Hq), 4, [&](size_t b, size_t e) {
    std::vector<float> scores;
    for (size_t job = b; job < e; ++job) {
      const int64_t t = int64_t(job) / Hq, h = int64_t(job) % Hq, g = h / group;
      const int64_t p = start_pos + t;
      const int64_t lo = window > 0 ? std::max<int64_t>(0, p - window + 1) : 0;
      const float* qv = q + (t * Hq + h) * d;
      scores.resize(size_t(p - lo + 1));
      float m = sinks[h];  // the sink takes part in the max
      for (int64_t k = lo; k <= p; ++k) {
        const float* kk = kv.key(k) + g * d;
        float s = 0;
        for (int64_t i = 0; i < d; ++i) s += qv[i] * kk[i];
        s *= scale;
        scores[size_t(k - lo)] = s;
        m = std::max(m, s);
      }
      double denom = std::exp(double(sinks[h]) - m);  // the sink has no value: denominator only
      for (auto& s : scores) {
        s = float(std::exp(double(s) - m));
        denom += s;
      }
      float* o = out + (t * Hq + h) * d;
      std::fill(o, o + d, 0.0f);
      for (int64_t k = lo; k <= p; ++k) {
        const float w = float(scores[size_t(k - lo)] / denom);
        const float* vv = kv.value(k) + g * d;
        for (int64_t i = 0; i < d; ++i) o[i] += w * vv[i];
      }
    }
  });
}

void clamped_swiglu(const float* gate_up, int64_t inter, float alpha, float limit, float* z) {
  for (int64_t i = 0; i < inter; ++i) {
    const float gate = std::min(gate_up[2 * i], limit);  // upper clamp only
    const float up = std::clamp(gate_up[2 * i + 1], -limit, limit);
    const float glu = gate / (1.0f + std::exp(-alpha * gate));  // gate * sigmoid(alpha * gate)
    z[i] = glu * (up + 1.0f);
  }
}

void moe(const float* h, int64_t n, const model::ModelConfig& c, const LayerWeights& w, float* out,
         std::vector<int32_t>* chosen_out, int64_t expert_begin, int64_t expert_end) {
  const int64_t H = c.hidden_size, I = c.intermediate_size, E = c.num_experts, K = c.experts_per_token;
  std::vector<float> logits(size_t(n * E));
  linear(h, n, w.router, w.router_bias.data(), logits.data());

  // Top-k per token (ties -> lower expert id), softmax over the k selected logits.
  std::vector<int32_t> chosen(size_t(n * K));
  std::vector<float> weight(size_t(n * K));
  std::vector<int32_t> order(static_cast<size_t>(E));
  for (int64_t t = 0; t < n; ++t) {
    const float* r = logits.data() + t * E;
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + K, order.end(),
                      [&](int32_t a, int32_t b) { return r[a] > r[b] || (r[a] == r[b] && a < b); });
    const float mx = r[order[0]];
    double sum = 0;
    for (int64_t k = 0; k < K; ++k) sum += std::exp(double(r[order[size_t(k)]]) - mx);
    for (int64_t k = 0; k < K; ++k) {
      chosen[size_t(t * K + k)] = order[size_t(k)];
      weight[size_t(t * K + k)] = float(std::exp(double(r[order[size_t(k)]]) - mx) / sum);
    }
  }

  if (chosen_out) *chosen_out = chosen;

  // Each expert runs on the tokens that chose it; results land in per-(token, slot) rows and are summed in
  // slot order, so the result does not depend on threading.
  std::vector<float> expert_out(size_t(n * K * H));
  std::vector<float> xs, gu, z, y;
  if (expert_end < 0) expert_end = E;
  for (int64_t e = expert_begin; e < expert_end; ++e) {
    std::vector<int64_t> rows;  // t * K + k
    for (int64_t i = 0; i < n * K; ++i)
      if (chosen[size_t(i)] == e) rows.push_back(i);
    if (rows.empty()) continue;
    const int64_t m = int64_t(rows.size());
    xs.resize(size_t(m * H));
    for (int64_t r = 0; r < m; ++r) std::copy_n(h + (rows[size_t(r)] / K) * H, H, xs.data() + r * H);
    gu.resize(size_t(m * 2 * I));
    linear(xs.data(), m, w.gate_up[size_t(e)], w.gate_up_bias.data() + e * 2 * I, gu.data());
    z.resize(size_t(m * I));
    for (int64_t r = 0; r < m; ++r)
      clamped_swiglu(gu.data() + r * 2 * I, I, float(c.swiglu_alpha), float(c.swiglu_limit),
                     z.data() + r * I);
    y.resize(size_t(m * H));
    linear(z.data(), m, w.down[size_t(e)], w.down_bias.data() + e * H,
           y.data());  // bias inside the weighted sum
    for (int64_t r = 0; r < m; ++r) std::copy_n(y.data() + r * H, H, expert_out.data() + rows[size_t(r)] * H);
  }
  for (int64_t t = 0; t < n; ++t) {
    float* o = out + t * H;
    std::fill(o, o + H, 0.0f);
    for (int64_t k = 0; k < K; ++k) {
      const float wk = weight[size_t(t * K + k)];
      const float* ye = expert_out.data() + (t * K + k) * H;
      for (int64_t i = 0; i < H; ++i) o[i] += wk * ye[i];
    }
  }
}

}  // namespace orchid::runtime::cpu
