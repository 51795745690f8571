#include "runtime/cuda/device_weights.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "io/checkpoint.h"
#include "kernels/common/cuda_check.h"
#include "kernels/moe/mxfp4_word_order.h"
#include "kernels/moe/weight_convert.h"
#include "kernels/ops/ops.h"
#include "kernels/synthetic/synthetic_fill.h"
#include "model/manifest.h"
#include "model/synthetic.h"
#include "runtime/cuda/host_upload.h"

namespace orchid::runtime::cuda {

namespace {

int64_t round_up(int64_t v, int64_t m) {
  return (v + m - 1) / m * m;
}

// Bytes of each expert tensor in a format: {w1, w1_scale, w2, w2_scale}.
struct ExpertBytes {
  size_t w1 = 0, w1_scale = 0, w2 = 0, w2_scale = 0;
};
ExpertBytes expert_bytes(const model::ModelConfig& c, kernels::MoeWeights f, int64_t experts, bool repack) {
  const size_t E = size_t(experts), H = size_t(c.hidden_size), I = size_t(c.intermediate_size);
  ExpertBytes b;
  switch (f) {
    case kernels::MoeWeights::kMxfp4:
      // repacked: each 16-row group's MX blocks padded to a multiple of 4 (mxfp4_word_order.h)
      b.w1 = repack ? size_t(kernels::mxfp4_order::grouped_bytes(int64_t(E * 2 * I), int(H)))
                    : E * 2 * I * H / 2;
      b.w1_scale = E * 2 * I * H / 32;
      b.w2 = repack ? size_t(kernels::mxfp4_order::grouped_bytes(int64_t(E * H), int(I))) : E * H * I / 2;
      b.w2_scale = E * H * I / 32;
      break;
    case kernels::MoeWeights::kBf16:
      b.w1 = E * 2 * I * H * 2;
      b.w2 = E * H * I * 2;
      break;
    case kernels::MoeWeights::kFp8: {
      const size_t Hp = size_t(round_up(int64_t(H), 128)), Ip = size_t(round_up(int64_t(I), 128));
      b.w1 = E * 2 * I * Hp;
      b.w1_scale = E * size_t(round_up(int64_t(2 * I), 128) / 128) * (Hp / 128) * 4;
      b.w2 = E * H * Ip;
      b.w2_scale = E * size_t(round_up(int64_t(H), 128) / 128) * (Ip / 128) * 4;
      break;
    }
  }
  return b;
}

// Where a tensor's bytes come from: the mapped checkpoint or the synthetic generator (on the GPU). A rank
// reads only its slice (model/parallel.h) of what is split along the first dimension; a column slice (the
// row-parallel O projection) is taken on the device from the whole tensor.
class TensorSource {
 public:
  TensorSource(const model::ModelRef& ref, const model::ModelConfig& c, const model::RankShard& shard,
               cudaStream_t stream)
      : ref_(ref), config_(c), shard_(shard), stream_(stream) {
    if (!ref.synthetic) {
      ck_ = model::open_checkpoint(ref.dir, model::gpt_oss_manifest(c));
    }
    for (auto& s : model::gpt_oss_manifest(c)) specs_.emplace(s.name, s);
    size_t total = 0;
    for (auto& [n, s] : specs_) total += bytes(n);
    if (!ref.synthetic) uploader_ = std::make_unique<HostUploader>(total, stream);
  }

  DType dtype(const std::string& name) const {
    return ref_.synthetic ? specs_.at(name).dtypes.front() : ck_.get(name).dtype;
  }
  size_t bytes(const std::string& name) const {
    const auto& s = specs_.at(name);
    size_t n = 1;
    for (auto d : s.shape) n *= size_t(d);
    return n * dtype_size(dtype(name));
  }
  int64_t numel(const std::string& name) const {
    int64_t n = 1;
    for (auto d : specs_.at(name).shape) n *= d;
    return n;
  }

  // This rank's part of the tensor.
  model::TensorSlice slice(const std::string& name) const {
    return shard_.slice_of(specs_.at(name), config_);
  }
  int64_t slice_numel(const std::string& name) const {
    const model::TensorSlice sl = slice(name);
    if (sl.replicated()) return numel(name);
    return numel(name) / specs_.at(name).shape[size_t(sl.dim)] * (sl.end - sl.begin);
  }

  // Copies this rank's slice of the tensor's stored bytes to `dst` (device), packed. A column slice goes
  // through `scratch` (device, the whole tensor's bytes).
  void fetch(const std::string& name, void* dst, void* scratch = nullptr) {
    const model::TensorSlice sl = slice(name);
    const auto& shape = specs_.at(name).shape;
    if (sl.replicated() || (sl.begin == 0 && sl.end == shape[size_t(sl.dim)]))
      return fetch_range(name, 0, numel(name), dst);
    const int64_t inner = numel(name) / shape[0];  // elements per index of the first dimension
    if (sl.dim == 0) return fetch_range(name, sl.begin * inner, (sl.end - sl.begin) * inner, dst);
    ORCHID_CHECK(sl.dim == 1 && shape.size() == 2 && scratch != nullptr, "tensor '{}': slice along dim {}",
                 name, sl.dim);
    fetch_range(name, 0, numel(name), scratch);
    const size_t es = dtype_size(dtype(name));
    const size_t width = size_t(sl.end - sl.begin) * es, pitch = size_t(shape[1]) * es;
    ORCHID_CUDA_CHECK(cudaMemcpy2DAsync(dst, width, static_cast<uint8_t*>(scratch) + size_t(sl.begin) * es,
                                        pitch, width, size_t(shape[0]), cudaMemcpyDeviceToDevice, stream_));
    ORCHID_CUDA_CHECK(cudaStreamSynchronize(stream_));  // `scratch` is reused by the next tensor
  }

  void finish() {
    if (uploader_) uploader_->finish();
  }

 private:
  // Elements [begin, begin + count) of the tensor as stored, to `dst`.
  void fetch_range(const std::string& name, int64_t begin, int64_t count, void* dst) {
    if (!ref_.synthetic) {
      const auto& t = ck_.get(name);
      const size_t es = dtype_size(t.dtype);
      uploader_->upload(dst, static_cast<const uint8_t*>(t.data) + size_t(begin) * es, size_t(count) * es);
      return;
    }
    const auto& spec = specs_.at(name);
    const auto d = model::synthetic_distribution(spec.role);
    kernels::SyntheticFill f;
    f.key = model::synthetic_tensor_key(name, ref_.seed);
    f.scale = d.std * 1.7320508075688772f;
    f.mean = d.mean;
    f.kind = d.kind == model::SyntheticDistribution::kBytes    ? kernels::SyntheticFillKind::kBytes
             : d.kind == model::SyntheticDistribution::kScales ? kernels::SyntheticFillKind::kScales
                                                               : kernels::SyntheticFillKind::kNormalBf16;
    kernels::synthetic_fill(f, begin, count, dst, stream_);
  }

  model::ModelRef ref_;
  model::ModelConfig config_;
  model::RankShard shard_;
  cudaStream_t stream_;
  io::Checkpoint ck_;
  std::map<std::string, model::TensorSpec> specs_;
  std::unique_ptr<HostUploader> uploader_;
};

}  // namespace

kernels::MoeWeights parse_weight_format(const std::string& name) {
  if (name == "mxfp4") return kernels::MoeWeights::kMxfp4;
  if (name == "fp8") return kernels::MoeWeights::kFp8;
  if (name == "bf16") return kernels::MoeWeights::kBf16;
  fail("--weights: unknown format '{}' (expected fp8, mxfp4 or bf16)", name);
}

// The expert blocks' words in mxfp4_word_order.h's order and grouped in kilobyte chunks of 16 rows (its
// repacked form) unless ORCHID_MXFP4_WORD_ORDER=checkpoint (H200, 2026-12-05: the word order made decode
// steps 0.7% faster at one token, 4-6% at 16-256; H100, 2026-12-06: the chunks 2-7% at 1-256).
bool DeviceWeights::mxfp4_repack_requested() {
  const char* order = std::getenv("ORCHID_MXFP4_WORD_ORDER");
  const std::string v = order != nullptr ? order : "tiled";
  if (v != "tiled" && v != "checkpoint")
    fail("ORCHID_MXFP4_WORD_ORDER: '{}' is neither 'tiled' nor 'checkpoint'", v);
  return v == "tiled";
}

size_t DeviceWeights::bytes_needed(const model::ModelConfig& c, kernels::MoeWeights format,
                                   const model::RankShard& shard, bool repack) {
  const size_t H = size_t(c.hidden_size), V = size_t(c.vocab_size), E = size_t(shard.num_experts());
  const size_t Ef = size_t(c.num_experts);
  const size_t Vl = size_t(shard.vocab_end - shard.vocab_begin), d = size_t(c.head_dim);
  const size_t q_dim = size_t(shard.num_q_heads()) * d, kv_dim = size_t(shard.num_kv_heads()) * d;
  const size_t qkv = q_dim + 2 * kv_dim, I = size_t(c.intermediate_size);
  size_t total =
      arena_bytes(V * H * 2) + (c.tie_word_embeddings ? 0 : arena_bytes(Vl * H * 2)) + arena_bytes(H * 4);
  const ExpertBytes eb = expert_bytes(c, format, int64_t(E), repack && format == kernels::MoeWeights::kMxfp4);
  const size_t per_layer =
      2 * arena_bytes(H * 4) + arena_bytes(size_t(shard.num_q_heads()) * 4) + arena_bytes(qkv * H * 2) +
      arena_bytes(qkv * 4) + arena_bytes(H * q_dim * 2) + arena_bytes(H * 2) + arena_bytes(H * 4) +
      arena_bytes(Ef * H * 2) + arena_bytes(Ef * 4) +  // the router scores every expert
      arena_bytes(E * 2 * I * 2) + arena_bytes(E * H * 2) + arena_bytes(eb.w1) + arena_bytes(eb.w1_scale) +
      arena_bytes(eb.w2) + arena_bytes(eb.w2_scale) + arena_bytes(8);  // the MXFP4 tensors' largest scales
  return total + per_layer * size_t(c.num_layers);
}

DeviceWeights DeviceWeights::load(const model::ModelRef& ref, const model::ModelConfig& c,
                                  kernels::MoeWeights format, cudaStream_t stream,
                                  const model::RankShard& shard, bool repack) {
  if (!c.experts_mxfp4)
    fail(
        "{}: the CUDA backend loads MXFP4 expert checkpoints (the official layout); this one stores dense "
        "experts",
        c.name);
  if (c.head_dim != 64) fail("{}: the CUDA kernels need head_dim 64, the model has {}", c.name, c.head_dim);
  const auto t0 = std::chrono::steady_clock::now();
  DeviceWeights w;
  w.format = format;
  w.mxfp4_tiled_order = format == kernels::MoeWeights::kMxfp4 && repack;
  const size_t need = bytes_needed(c, format, shard, w.mxfp4_tiled_order);
  w.arena = DeviceArena(need, "weights");
  TensorSource src(ref, c, shard, stream);

  // Staging for conversions: the largest tensor that is not stored as the kernels take it.
  size_t staging_bytes = 0;
  for (const auto& s : model::gpt_oss_manifest(c)) staging_bytes = std::max(staging_bytes, src.bytes(s.name));
  const size_t H = size_t(c.hidden_size), E = size_t(c.num_experts), I = size_t(c.intermediate_size);
  staging_bytes = std::max(staging_bytes, size_t(E * 2 * I * H / 32));  // blocks and scales side by side
  // Column slices (the O projection) are cut from the whole tensor in a second region.
  const size_t column_bytes = src.bytes(fmt::format("model.layers.{}.self_attn.o_proj.weight", 0));
  DeviceBuffer staging(staging_bytes + arena_bytes(E * 2 * I * H / 32) + 512 + arena_bytes(column_bytes),
                       "weight staging");
  uint8_t* stage = staging.data();
  uint8_t* column_stage = stage + arena_bytes(staging_bytes + arena_bytes(E * 2 * I * H / 32) + 256);

  // A vector as fp32.
  // This rank's slice of a vector (or matrix) as fp32.
  auto f32 = [&](const std::string& name, float* dst = nullptr) {
    if (!dst) dst = w.arena.take<float>(size_t(src.slice_numel(name)));
    if (src.dtype(name) == DType::kF32) {
      src.fetch(name, dst, column_stage);
    } else if (src.dtype(name) == DType::kBF16) {
      src.fetch(name, stage, column_stage);
      kernels::ops::bf16_to_f32(reinterpret_cast<const __nv_bfloat16*>(stage), dst, src.slice_numel(name),
                                stream);
    } else {
      fail("{}: tensor '{}' must be BF16 or F32 for the CUDA backend", c.name, name);
    }
    ORCHID_CUDA_CHECK(cudaStreamSynchronize(stream));  // `stage` is reused by the next tensor
    return dst;
  };
  // This rank's slice of a tensor as bf16, into `dst` (default: a fresh arena slice).
  auto bf16 = [&](const std::string& name, __nv_bfloat16* dst = nullptr) {
    if (!dst) dst = w.arena.take<__nv_bfloat16>(size_t(src.slice_numel(name)));
    if (src.dtype(name) == DType::kBF16) {
      src.fetch(name, dst, column_stage);
    } else if (src.dtype(name) == DType::kF32) {
      src.fetch(name, stage, column_stage);
      kernels::ops::f32_to_bf16(reinterpret_cast<const float*>(stage), dst, src.slice_numel(name), stream);
      ORCHID_CUDA_CHECK(cudaStreamSynchronize(stream));
    } else {
      fail("{}: tensor '{}' must be BF16 or F32 for the CUDA backend", c.name, name);
    }
    return dst;
  };

  w.embedding = bf16("model.embed_tokens.weight");
  // Tied embeddings: this rank's vocabulary rows of the (replicated) embedding.
  w.lm_head = c.tie_word_embeddings ? w.embedding + size_t(shard.vocab_begin) * H : bf16("lm_head.weight");
  w.final_norm = f32("model.norm.weight");
  const int64_t El = shard.num_experts();
  const ExpertBytes eb = expert_bytes(c, format, El, w.mxfp4_tiled_order);
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string p = fmt::format("model.layers.{}.", l);
    DeviceLayer L;
    L.input_norm = f32(p + "input_layernorm.weight");
    L.post_norm = f32(p + "post_attention_layernorm.weight");
    L.sinks = f32(p + "self_attn.sinks");
    // Fused QKV: the q, k and v rows back to back, so one GEMM produces [T, q_dim + 2 kv_dim].
    const size_t q_rows = size_t(shard.num_q_heads() * c.head_dim),
                 kv_rows = size_t(shard.num_kv_heads() * c.head_dim);
    L.qkv_w = w.arena.take<__nv_bfloat16>((q_rows + 2 * kv_rows) * H);
    bf16(p + "self_attn.q_proj.weight", L.qkv_w);
    bf16(p + "self_attn.k_proj.weight", L.qkv_w + q_rows * H);
    bf16(p + "self_attn.v_proj.weight", L.qkv_w + (q_rows + kv_rows) * H);
    L.qkv_b = w.arena.take<float>(q_rows + 2 * kv_rows);
    f32(p + "self_attn.q_proj.bias", L.qkv_b);
    f32(p + "self_attn.k_proj.bias", L.qkv_b + q_rows);
    f32(p + "self_attn.v_proj.bias", L.qkv_b + q_rows + kv_rows);
    L.o_w = bf16(p + "self_attn.o_proj.weight");
    L.o_b = bf16(p + "self_attn.o_proj.bias");
    L.o_b_f32 = f32(p + "self_attn.o_proj.bias");
    L.moe.router_w = bf16(p + "mlp.router.weight");
    L.moe.router_b = f32(p + "mlp.router.bias");
    L.moe.b1 = bf16(p + "mlp.experts.gate_up_proj_bias");
    L.moe.b2 = bf16(p + "mlp.experts.down_proj_bias");
    auto* w1 = w.arena.take_bytes(eb.w1);
    auto* w1s = eb.w1_scale ? w.arena.take_bytes(eb.w1_scale) : nullptr;
    auto* w2 = w.arena.take_bytes(eb.w2);
    auto* w2s = eb.w2_scale ? w.arena.take_bytes(eb.w2_scale) : nullptr;
    L.moe.w1 = w1;
    L.moe.w1_scale = w1s;
    L.moe.w2 = w2;
    L.moe.w2_scale = w2s;
    uint32_t* scale_max = w.arena.take<uint32_t>(2);
    struct Mat {
      const char* name;
      int n, k;
      uint8_t *q, *s;
      uint32_t* s_max;
    };
    for (const Mat& m : {Mat{"gate_up_proj", int(2 * I), int(H), w1, w1s, scale_max},
                         Mat{"down_proj", int(H), int(I), w2, w2s, scale_max + 1}}) {
      const std::string blocks = p + "mlp.experts." + m.name + "_blocks";
      const std::string scales = p + "mlp.experts." + m.name + "_scales";
      if (format == kernels::MoeWeights::kMxfp4) {  // kept as stored, or repacked from the staging area
        src.fetch(scales, m.s);
        if (!w.mxfp4_tiled_order) {
          src.fetch(blocks, m.q);
          continue;
        }
        ORCHID_CHECK(src.slice_numel(blocks) == El * m.n * m.k / 2, "{}: unexpected block count", blocks);
        src.fetch(blocks, stage);  // this rank's experts
        kernels::mxfp4_to_tiled_order(stage, m.q, El * m.n, m.k, stream);
        kernels::mxfp4_scale_max(m.s, El * m.n * (m.k / 32), m.s_max, stream);
        ORCHID_CUDA_CHECK(cudaStreamSynchronize(stream));  // `stage` is reused by the next tensor
        continue;
      }
      uint8_t* sb = stage;
      uint8_t* ss = stage + arena_bytes(src.bytes(blocks));  // room for every expert's blocks
      src.fetch(blocks, sb);
      src.fetch(scales, ss);
      if (format == kernels::MoeWeights::kBf16) {
        kernels::mxfp4_to_bf16(sb, ss, int(El), m.n, m.k, m.q, stream);
      } else {
        kernels::mxfp4_to_fp8_block(sb, ss, int(El), m.n, m.k, kernels::Fp8ScaleRule::kPow2, m.q,
                                    reinterpret_cast<float*>(m.s), nullptr, stream);
      }
      ORCHID_CUDA_CHECK(cudaStreamSynchronize(stream));
    }
    if (w.mxfp4_tiled_order) {
      L.moe.w1_scale_max = scale_max;
      L.moe.w2_scale_max = scale_max + 1;
    }
    w.layers.push_back(L);
  }
  src.finish();
  ORCHID_CUDA_CHECK(cudaStreamSynchronize(stream));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  spdlog::info("weights on the GPU: {:.2f} GiB ({} experts) in {:.1f} s", double(w.arena.used()) / (1 << 30),
               format == kernels::MoeWeights::kMxfp4 ? (w.mxfp4_tiled_order ? "mxfp4, repacked" : "mxfp4")
               : format == kernels::MoeWeights::kFp8 ? "fp8"
                                                     : "bf16",
               s);
  return w;
}

}  // namespace orchid::runtime::cuda
