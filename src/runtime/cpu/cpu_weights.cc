#include "runtime/cpu/cpu_weights.h"

#include <fmt/format.h>

#include "core/host_memory.h"

namespace orchid::runtime::cpu {

namespace {
// transformers stores dense experts as [E, in, out] (used as x @ W); the matmul wants [out, in] rows.
MatrixRef transposed_expert(const io::TensorView& t, int64_t e, CpuWeights& w) {
  const int64_t in = t.shape[1], out = t.shape[2];
  MatrixRef src = MatrixRef::dense(t, e);
  std::vector<float> rows(size_t(in * out));
  src.rows_f32(0, in, rows.data());
  auto buf = std::make_unique<std::vector<float>>(size_t(in * out));
  for (int64_t i = 0; i < in; ++i)
    for (int64_t o = 0; o < out; ++o) (*buf)[size_t(o * in + i)] = rows[size_t(i * out + o)];
  MatrixRef m;
  m.dtype = DType::kF32;
  m.data = reinterpret_cast<const uint8_t*>(buf->data());
  m.rows = out;
  m.cols = in;
  w.owned.push_back(std::move(buf));
  return m;
}
}  // namespace

CpuWeights CpuWeights::resolve(const model::LoadedModel& m) {
  const auto& c = m.config;
  const auto& ck = m.checkpoint;
  CpuWeights w;
  if (!c.experts_mxfp4) {  // dense experts become fp32 [out, in] copies (transposed_expert)
    // gate_up [hidden, 2 * intermediate] and down [intermediate, hidden] an expert
    const uint64_t per_layer =
        uint64_t(c.num_experts) * 3 * uint64_t(c.hidden_size) * uint64_t(c.intermediate_size) * sizeof(float);
    require_host_memory(per_layer * uint64_t(c.num_layers),
                        "the CPU backend's fp32 copy of the dense experts",
                        "use the MXFP4 checkpoint (its experts are read as stored) or the CUDA backend");
  }
  w.embedding = MatrixRef::dense(ck.get("model.embed_tokens.weight"));
  w.lm_head =
      MatrixRef::dense(ck.get(c.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight"));
  w.final_norm = to_f32(ck.get("model.norm.weight"));
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string p = fmt::format("model.layers.{}.", l);
    auto t = [&](const char* s) -> const io::TensorView& { return ck.get(p + s); };
    LayerWeights L;
    L.input_norm = to_f32(t("input_layernorm.weight"));
    L.post_norm = to_f32(t("post_attention_layernorm.weight"));
    L.sinks = to_f32(t("self_attn.sinks"));
    L.q = MatrixRef::dense(t("self_attn.q_proj.weight"));
    L.k = MatrixRef::dense(t("self_attn.k_proj.weight"));
    L.v = MatrixRef::dense(t("self_attn.v_proj.weight"));
    L.o = MatrixRef::dense(t("self_attn.o_proj.weight"));
    L.q_bias = to_f32(t("self_attn.q_proj.bias"));
    L.k_bias = to_f32(t("self_attn.k_proj.bias"));
    L.v_bias = to_f32(t("self_attn.v_proj.bias"));
    L.o_bias = to_f32(t("self_attn.o_proj.bias"));
    L.router = MatrixRef::dense(t("mlp.router.weight"));
    L.router_bias = to_f32(t("mlp.router.bias"));
    L.gate_up_bias = to_f32(t("mlp.experts.gate_up_proj_bias"));
    L.down_bias = to_f32(t("mlp.experts.down_proj_bias"));
    for (int64_t e = 0; e < c.num_experts; ++e) {
      if (c.experts_mxfp4) {
        L.gate_up.push_back(
            MatrixRef::mxfp4(t("mlp.experts.gate_up_proj_blocks"), t("mlp.experts.gate_up_proj_scales"), e));
        L.down.push_back(
            MatrixRef::mxfp4(t("mlp.experts.down_proj_blocks"), t("mlp.experts.down_proj_scales"), e));
      } else {
        L.gate_up.push_back(transposed_expert(t("mlp.experts.gate_up_proj"), e, w));
        L.down.push_back(transposed_expert(t("mlp.experts.down_proj"), e, w));
      }
    }
    w.layers.push_back(std::move(L));
  }
  return w;
}

}  // namespace orchid::runtime::cpu
