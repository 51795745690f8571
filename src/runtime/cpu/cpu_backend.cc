#include "runtime/cpu/cpu_backend.h"

#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <signal.h>
#include <sys/mman.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <type_traits>

#include "core/dtypes.h"
#include "core/error.h"
#include "core/host_memory.h"
#include "runtime/cpu/cpu_blocks.h"
#include "runtime/kv_reshard.h"
#include "runtime/rank_threads.h"
#include "runtime/sampler.h"

namespace orchid::runtime::cpu {

// One rank: its shard of the weights (views), its heads' KV pools, its communicators.
struct CpuBackend::Rank {
  model::RankShard shard;
  model::ModelConfig cfg;  // the model with this rank's heads (attention sizes come from here)
  const model::ModelConfig* full = nullptr;
  const model::RopeTables* rope = nullptr;
  KvCacheSpec spec;
  CpuWeights w;
  std::vector<int64_t> layer_slot;  // index of a layer among the layers of its kind
  std::vector<float> full_k, full_v, sliding_k, sliding_v;
  // --kv-cache-dtype fp8: K/V are stored rounded through e4m3 with these scales, [layer][this rank's KV
  // head] (all 1.0: no checkpoint scales), except layer `exact_layer`, kept as computed. Empty for bf16.
  std::vector<float> k_scale, v_scale;
  int64_t exact_layer = -1;
  Communicator* tp = nullptr;             // all-reduce after O, all-gather of the logits
  Communicator* ep = nullptr;             // all-reduce after the MoE, or the shared MoE's gather/scatter
  LocalCommunicator* tp_local = nullptr;  // for abort(); null when solo
  LocalCommunicator* ep_local = nullptr;
  // The EP group holds ranks of several replicas: the MoE gathers the group's tokens (moe_block).
  bool moe_gathers = false;
  // This step's tokens per EP rank (share_counts): rows, bytes of the routed inputs, floats of the combine.
  std::vector<size_t> ep_rows, ep_bytes, ep_floats;
  size_t ep_row_begin = 0;  // this rank's first row among them

  float* kv_row(bool key, int64_t layer, int32_t page, int64_t slot);
  // Stores one token's K or V row (kv_dim floats) at kv_row(key, layer, page, slot), at the cache's
  // precision.
  void store_kv(bool key, int64_t layer, int32_t page, int64_t slot, const float* x);
  // Every rank calls it with its step's token count before the layers (a collective when moe_gathers).
  void share_counts(int64_t n);
  void layer_forward(int64_t l, const StepBatch& b, const std::vector<int32_t>& positions,
                     std::vector<float>& x, std::vector<int32_t>* topk);
  // The MoE of the normed rows h [n, H] into out [n, H], whole (summed over the EP group).
  void moe_block(const LayerWeights& L, const std::vector<float>& h, int64_t n, std::vector<float>& out,
                 std::vector<int32_t>* topk);
  // Every layer, then the logits of `rows` (all ranks end with the whole vocabulary in `logits`). With
  // `aux_layers`, `aux` receives each token's hidden state at those layers' inputs (id num_layers: the last
  // layer's output), [tokens][ids][hidden].
  void forward(const StepBatch& b, const std::vector<int32_t>& positions, const std::vector<int64_t>& rows,
               std::vector<float>& logits, const std::vector<int64_t>* aux_layers = nullptr,
               std::vector<float>* aux = nullptr);
};

// What the replicas of one group share: the weights (one copy), the plan, and every rank's communicators.
struct CpuBackend::Group {
  model::LoadedModel model;
  CpuWeights w;
  model::RopeTables rope;
  model::ShardPlan plan;
  SoloCommunicator solo;
  // In-process ranks: rank r's TP group (its replica's ranks) and EP group (runs of EP consecutive ranks).
  std::vector<std::unique_ptr<LocalCommunicator>> tp, ep;

  Group(model::LoadedModel m, const CpuBackendOptions& opts);
};

namespace {
CpuWeights shard_weights(const CpuWeights& all, const model::RankShard& s, const model::ModelConfig& c) {
  const int64_t d = c.head_dim;
  auto part = [](const std::vector<float>& v, int64_t b, int64_t e) {
    return std::vector<float>(v.begin() + b, v.begin() + e);
  };
  CpuWeights w;
  w.embedding = all.embedding;
  w.lm_head = all.lm_head.row_slice(s.vocab_begin, s.vocab_end);
  w.final_norm = all.final_norm;
  for (const LayerWeights& a : all.layers) {
    LayerWeights L = a;  // views and small vectors; then the attention slices
    const int64_t q0 = s.q_head_begin * d, q1 = s.q_head_end * d, k0 = s.kv_head_begin * d,
                  k1 = s.kv_head_end * d;
    L.q = a.q.row_slice(q0, q1);
    L.k = a.k.row_slice(k0, k1);
    L.v = a.v.row_slice(k0, k1);
    L.o = a.o.col_slice(q0, q1);
    L.q_bias = part(a.q_bias, q0, q1);
    L.k_bias = part(a.k_bias, k0, k1);
    L.v_bias = part(a.v_bias, k0, k1);
    L.sinks = part(a.sinks, s.q_head_begin, s.q_head_end);
    w.layers.push_back(std::move(L));
  }
  return w;
}
}  // namespace

CpuBackend::Group::Group(model::LoadedModel m, const CpuBackendOptions& opts)
    : model(std::move(m)), w(CpuWeights::resolve(model)) {
  const auto& c = model.config;
  rope = model::rope_tables(c.rope, c.head_dim);
  if (opts.page_size <= 0) fail("--block-size must be positive, got {}", opts.page_size);
  plan = model::make_shard_plan(c, opts.parallel, c.experts_mxfp4 ? "mxfp4" : "bf16");
  const int world = opts.parallel.world(), tp_size = opts.parallel.tp, ep_size = opts.parallel.ep;
  if (opts.process_group) {
    if (opts.parallel.dp != 1)
      fail("--dp {} across processes (--nnodes): attention replicas run as threads of one process so far",
           opts.parallel.dp);
    if (opts.process_group->size() != world)
      fail("--nnodes {} must equal the ranks of --tp {} x --dp {} (one rank per process)",
           opts.process_group->size(), opts.parallel.tp, opts.parallel.dp);
    if (ep_size != 1 && ep_size != world)
      fail("--ep {} across processes: use --ep 1 or --ep {} (every rank)", ep_size, world);
    return;
  }
  // TP groups are the replicas' ranks; EP groups are runs of `ep` consecutive ranks, which may cross
  // replicas (then the MoE is shared).
  for (int d = 0; d < opts.parallel.dp; ++d)
    for (auto& comm : make_local_group(tp_size)) tp.push_back(std::move(comm));
  for (int g = 0; g < world / ep_size; ++g)
    for (auto& comm : make_local_group(ep_size)) ep.push_back(std::move(comm));
  if (world > 1) spdlog::info("cpu backend: {}", plan.describe(c));
}

std::shared_ptr<CpuBackend::Group> CpuBackend::one_replica_group(model::LoadedModel model,
                                                                 const CpuBackendOptions& opts) {
  if (opts.parallel.dp != 1)
    fail("--dp {}: a CpuBackend is one attention replica (CpuBackend::replicas makes the {} replicas)",
         opts.parallel.dp, opts.parallel.dp);
  return std::make_shared<Group>(std::move(model), opts);
}

CpuBackend::CpuBackend(model::LoadedModel model, const CpuBackendOptions& opts)
    : CpuBackend(one_replica_group(std::move(model), opts), 0, opts) {}

std::vector<std::shared_ptr<CpuBackend>> CpuBackend::replicas(model::LoadedModel model,
                                                              const CpuBackendOptions& opts) {
  auto group = std::make_shared<Group>(std::move(model), opts);
  std::vector<std::shared_ptr<CpuBackend>> out;
  for (int d = 0; d < opts.parallel.dp; ++d)
    out.push_back(std::shared_ptr<CpuBackend>(new CpuBackend(group, d, opts)));
  return out;
}

std::vector<std::shared_ptr<CpuBackend>> CpuBackend::create_replicas(const std::string& model_arg,
                                                                     const CpuBackendOptions& opts) {
  return replicas(model::load_model(model_arg), opts);
}

const model::ModelConfig& CpuBackend::model_config() const {
  return group_->model.config;
}

const model::ShardPlan& CpuBackend::plan() const {
  return group_->plan;
}

CpuBackend::CpuBackend(std::shared_ptr<Group> group, int replica, const CpuBackendOptions& opts)
    : group_(std::move(group)), replica_(replica) {
  const auto& c = group_->model.config;
  const model::ParallelConfig& pc = group_->plan.config;
  spec_.page_size = opts.page_size;
  share_bytes_ = opts.kv_share_bytes;
  share_timeout_ms_ = opts.kv_share_timeout_ms;
  spec_.sliding_window = c.num_sliding_layers() > 0 ? int32_t(c.sliding_window) : 0;
  const int32_t default_pages = int32_t((opts.max_tokens + opts.page_size - 1) / opts.page_size);
  spec_.num_full_pages = opts.num_full_pages > 0 ? opts.num_full_pages : default_pages;
  spec_.num_sliding_pages = opts.num_sliding_pages > 0 ? opts.num_sliding_pages : default_pages;
  kv_dtype_ = opts.kv_cache_dtype;
  lockstep_ = pc.shares_experts() ? int32_t(pc.dp) : 1;

  // In a process group this process holds one rank, whose TP group is the process group.
  process_group_ = opts.process_group;
  // The pools below are fp32 K and V of every layer and rank of this replica, zeroed now: refuse what the
  // host cannot hold before touching it.
  uint64_t kv_bytes = 0;
  for (int r = replica * pc.tp; r < (replica + 1) * pc.tp; ++r) {
    if (process_group_ && r != process_group_->rank()) continue;
    const uint64_t row = uint64_t(group_->plan.ranks[size_t(r)].num_kv_heads() * c.head_dim) *
                         uint64_t(spec_.page_size) * sizeof(float);
    kv_bytes += 2 * row *
                (uint64_t(c.num_full_layers()) * uint64_t(spec_.num_full_pages) +
                 uint64_t(c.num_sliding_layers()) * uint64_t(spec_.num_sliding_pages));
  }
  require_host_memory(
      kv_bytes,
      fmt::format("the CPU backend's KV cache (fp32; {} full and {} sliding pages of {} tokens)",
                  spec_.num_full_pages, spec_.num_sliding_pages, spec_.page_size),
      "lower --max-model-len or --kv-pages (bench: the lengths or batch sizes)");
  for (int r = replica * pc.tp; r < (replica + 1) * pc.tp; ++r) {
    if (process_group_ && r != process_group_->rank()) continue;
    auto rank = std::make_unique<Rank>();
    rank->shard = group_->plan.ranks[size_t(r)];
    rank->cfg = c;
    rank->cfg.num_heads = rank->shard.num_q_heads();
    rank->cfg.num_kv_heads = rank->shard.num_kv_heads();
    rank->full = &c;
    rank->rope = &group_->rope;
    rank->spec = spec_;
    rank->w = shard_weights(group_->w, rank->shard, c);
    int64_t full = 0, sliding = 0;
    for (int64_t l = 0; l < c.num_layers; ++l)
      rank->layer_slot.push_back(c.is_sliding(l) ? sliding++ : full++);
    const size_t row = size_t(rank->cfg.kv_dim()) * size_t(spec_.page_size);
    rank->full_k.assign(size_t(full) * size_t(spec_.num_full_pages) * row, 0.0f);
    rank->full_v.assign(rank->full_k.size(), 0.0f);
    rank->sliding_k.assign(size_t(sliding) * size_t(spec_.num_sliding_pages) * row, 0.0f);
    rank->sliding_v.assign(rank->sliding_k.size(), 0.0f);
    if (kv_dtype_ == KvCacheDtype::kFp8E4M3) {
      rank->k_scale.assign(size_t(c.num_layers * rank->cfg.num_kv_heads), 1.0f);
      rank->v_scale = rank->k_scale;
      // The CUDA backend's precise layer (layer 0 when it is a sliding layer, cuda_rank.h) keeps fp32
      // pages whatever --kv-cache-dtype says; the reference keeps that layer's K/V unrounded too.
      rank->exact_layer = c.num_layers > 0 && c.is_sliding(0) ? 0 : -1;
    }
    if (process_group_) {
      rank->tp = process_group_.get();
      rank->ep = pc.ep == 1 ? static_cast<Communicator*>(&group_->solo) : process_group_.get();
    } else {
      rank->tp_local = group_->tp[size_t(r)].get();
      rank->tp = rank->tp_local;
      rank->ep_local = group_->ep[size_t(r)].get();
      rank->ep = rank->ep_local;
      rank->moe_gathers = rank->shard.shared_experts;
    }
    ranks_.push_back(std::move(rank));
  }
  if (kv_dtype_ != KvCacheDtype::kBf16 && replica == 0)
    spdlog::info("cpu backend: KV cache {}: K/V rounded through e4m3 with scale 1.0{}",
                 kv_cache_dtype_name(kv_dtype_),
                 c.num_layers > 0 && c.is_sliding(0) ? " (layer 0 kept fp32)" : "");
  if (!opts.eagle3_head.empty()) {
    head_ = std::make_unique<CpuEagle3Head>(model::load_eagle3_head(opts.eagle3_head, c), group_->w.embedding,
                                            spec_);
    if (replica == 0)
      spdlog::info("cpu backend: EAGLE-3 head {} (aux layers {}, draft vocabulary {})", opts.eagle3_head,
                   fmt::join(head_->config().aux_layers, ", "), head_->config().draft_vocab_size);
  }
  if (process_group_ && pc.world() > 1)
    spdlog::info("cpu backend: {} (this process: rank {})", group_->plan.describe(c), process_group_->rank());
}

namespace {
// What rank 0 of a process group sends before each step: the op, then the step (StepBatch, or a layer
// check's inputs). Every field of StepBatch is plain data.
enum class WorkerOp : int32_t { kStop = 0, kForward = 1, kRunLayer = 2 };

template <typename T>
void put(std::vector<char>& out, const std::vector<T>& v) {
  static_assert(std::is_trivially_copyable_v<T>);
  const uint64_t n = v.size();
  out.insert(out.end(), reinterpret_cast<const char*>(&n), reinterpret_cast<const char*>(&n) + 8);
  out.insert(out.end(), reinterpret_cast<const char*>(v.data()), reinterpret_cast<const char*>(v.data() + n));
}
template <typename T>
void put(std::vector<char>& out, const T& v) {
  put(out, std::vector<T>{v});
}
struct Reader {
  const std::vector<char>& in;
  size_t at = 0;
  template <typename T>
  std::vector<T> vec() {
    uint64_t n = 0;
    ORCHID_CHECK(at + 8 <= in.size(), "worker message truncated");
    std::memcpy(&n, in.data() + at, 8);
    at += 8;
    ORCHID_CHECK(at + n * sizeof(T) <= in.size(), "worker message truncated");
    std::vector<T> v(n);
    std::memcpy(v.data(), in.data() + at, n * sizeof(T));
    at += n * sizeof(T);
    return v;
  }
  template <typename T>
  T one() {
    auto v = vec<T>();
    ORCHID_CHECK(v.size() == 1, "worker message malformed");
    return v[0];
  }
};

std::vector<char> encode_batch(WorkerOp op, const StepBatch& b) {
  std::vector<char> m;
  put(m, op);
  put(m, b.tokens);
  put(m, b.seqs);
  put(m, b.full_page_table);
  put(m, b.sliding_page_table);
  put(m, b.params);
  put(m, b.history_tokens);
  put(m, b.banned_tokens);
  put(m, b.logits);
  return m;
}

StepBatch decode_batch(Reader& r) {
  StepBatch b;
  b.tokens = r.vec<int32_t>();
  b.seqs = r.vec<StepSequence>();
  b.full_page_table = r.vec<int32_t>();
  b.sliding_page_table = r.vec<int32_t>();
  b.params = r.vec<SamplingParams>();
  b.history_tokens = r.vec<int32_t>();
  b.banned_tokens = r.vec<int32_t>();
  b.logits = r.one<LogitsMode>();
  return b;
}

void send_to_workers(Communicator& g, std::vector<char> m) {
  uint64_t n = m.size();
  g.broadcast(&n, sizeof(n), 0);
  g.broadcast(m.data(), m.size(), 0);
}
}  // namespace

CpuBackend::~CpuBackend() {
  if (process_group_ && process_group_->rank() == 0) {
    try {
      std::vector<char> m;
      put(m, WorkerOp::kStop);
      send_to_workers(*process_group_, std::move(m));
    } catch (const std::exception& e) {
      spdlog::warn("cpu backend: could not stop the worker ranks: {}", e.what());
    }
  }
}

void CpuBackend::serve_worker() {
  ORCHID_CHECK(process_group_ && process_group_->rank() > 0, "serve_worker: not a worker rank");
  Rank& me = *ranks_[0];
  while (true) {
    uint64_t n = 0;
    process_group_->broadcast(&n, sizeof(n), 0);
    std::vector<char> m(n);
    process_group_->broadcast(m.data(), n, 0);
    Reader r{m};
    const auto op = r.one<WorkerOp>();
    if (op == WorkerOp::kStop) return;
    if (op == WorkerOp::kForward) {
      const StepBatch b = decode_batch(r);
      std::vector<int32_t> positions;
      std::vector<int64_t> rows;
      step_layout(b, positions, rows);
      std::vector<float> logits;
      me.forward(b, positions, rows, logits);
    } else {
      const auto layer = r.one<int64_t>();
      std::vector<float> x = r.vec<float>();
      const auto n_tok = r.one<int64_t>();
      const auto want_topk = r.one<int32_t>();
      const StepBatch b = single_sequence_batch(spec_, int32_t(n_tok));
      std::vector<int32_t> positions(static_cast<size_t>(n_tok));
      for (int64_t t = 0; t < n_tok; ++t) positions[size_t(t)] = int32_t(t);
      std::vector<int32_t> chosen;
      me.share_counts(n_tok);
      me.layer_forward(layer, b, positions, x, want_topk ? &chosen : nullptr);
    }
  }
}

std::unique_ptr<CpuBackend> CpuBackend::create(const std::string& model_arg, const CpuBackendOptions& opts) {
  if (opts.parallel.dp != 1)  // before loading anything
    fail("--dp {}: a CpuBackend is one attention replica (CpuBackend::replicas makes the {} replicas)",
         opts.parallel.dp, opts.parallel.dp);
  return std::make_unique<CpuBackend>(model::load_model(model_arg), opts);
}

float* CpuBackend::Rank::kv_row(bool key, int64_t layer, int32_t page, int64_t slot) {
  const bool is_sliding = full->is_sliding(layer);
  const int64_t pages = is_sliding ? spec.num_sliding_pages : spec.num_full_pages;
  auto& pool = is_sliding ? (key ? sliding_k : sliding_v) : (key ? full_k : full_v);
  const size_t idx =
      ((size_t(layer_slot[size_t(layer)]) * size_t(pages) + size_t(page)) * size_t(spec.page_size) +
       size_t(slot)) *
      size_t(cfg.kv_dim());
  return pool.data() + idx;
}

void CpuBackend::Rank::store_kv(bool key, int64_t layer, int32_t page, int64_t slot, const float* x) {
  float* row = kv_row(key, layer, page, slot);
  const int64_t D = cfg.head_dim;
  if (k_scale.empty() || layer == exact_layer) {
    std::copy_n(x, cfg.kv_dim(), row);
    return;
  }
  // e4m3(x / scale), as the GPU's KV-write kernel stores it (__fdiv_rn, rope_kv_write.cu): a division, not
  // a multiplication by 1 / scale, which for a scale other than a power of two can land on the other side
  // of a rounding boundary. Widened back as value * scale (the GPU folds K's scale into the softmax scale
  // and V's into the output: the same product, rounded elsewhere). The pool holds the widened fp32 value.
  const float* scale = (key ? k_scale : v_scale).data() + layer * cfg.num_kv_heads;
  for (int64_t h = 0; h < cfg.num_kv_heads; ++h)
    for (int64_t d = 0; d < D; ++d)
      row[h * D + d] = fp8e4m3_to_float(float_to_fp8e4m3(x[h * D + d] / scale[h])) * scale[h];
}

std::string CpuBackend::kv_layout() const {
  const auto& c = group_->model.config;
  // The model's shape too (not its weights): K/V of another model of the same attention shape is refused.
  return fmt::format(
      "cpu fp32: {} layers ({} sliding), {} KV heads x {}, page {}; hidden {}, {} experts, "
      "vocabulary {}{}",
      c.num_layers, c.num_sliding_layers(), c.num_kv_heads, c.head_dim, spec_.page_size, c.hidden_size,
      c.num_experts, c.vocab_size,
      // The values' precision (the bytes are fp32 either way): bf16 keeps the string it always had.
      kv_dtype_ == KvCacheDtype::kBf16 ? std::string()
                                       : fmt::format(", kv {}", kv_cache_dtype_name(kv_dtype_)));
}

// A page of one pool, every layer of that kind and rank, K then V: the bytes of kv_row(key, layer, page, 0)
// for page_size rows, in (rank, layer, key/value) order.
KvPages CpuBackend::read_kv(std::span<const int32_t> full_pages, std::span<const int32_t> sliding_pages,
                            int32_t first_sliding_page, int32_t num_tokens) {
  ORCHID_CHECK(supports_kv_handoff(), "K/V handoff across processes");
  KvPages kv =
      kv_pages_for(kv_layout(), full_pages.size(), sliding_pages.size(), first_sliding_page, num_tokens);
  kv.ranks = int32_t(ranks_.size());
  const auto& c = group_->model.config;
  for (const auto& r : ranks_) {
    const size_t bytes = size_t(r->cfg.kv_dim()) * size_t(spec_.page_size) * sizeof(float);
    for (int64_t l = 0; l < c.num_layers; ++l) {
      const bool sliding = c.is_sliding(l);
      const std::span<const int32_t> pages = sliding ? sliding_pages : full_pages;
      std::vector<uint8_t>& out = sliding ? kv.sliding : kv.full;
      const int32_t pool = sliding ? spec_.num_sliding_pages : spec_.num_full_pages;
      for (bool key : {true, false}) {
        for (int32_t page : pages) {
          ORCHID_CHECK(page >= 0 && page < pool, "page {} outside the pool", page);
          const auto* src = reinterpret_cast<const uint8_t*>(r->kv_row(key, l, page, 0));
          out.insert(out.end(), src, src + bytes);
        }
      }
    }
  }
  return kv;
}

void CpuBackend::write_kv(const KvPages& kv, std::span<const int32_t> full_pages,
                          std::span<const int32_t> sliding_pages) {
  ORCHID_CHECK(supports_kv_handoff(), "K/V handoff across processes");
  check_kv_pages_fit(kv, kv_layout(), full_pages.size(), sliding_pages.size());
  std::span<const uint8_t> full = kv.full, sliding = kv.sliding;
  if (kv.share) {
    const KvShareRank& at = shared_range(*kv.share);
    std::lock_guard<std::mutex> lock(share_mu_);
    const uint8_t* base = peers_.at(at.region).data() + at.offset;
    full = {base, size_t(at.full_bytes)};
    sliding = {base + at.full_bytes, size_t(at.sliding_bytes)};
  }
  if (kv.ranks == int32_t(ranks_.size())) return write_pages(full, sliding, full_pages, sliding_pages);
  // Another tensor-parallel split: each page's slots hold [heads][head_dim] fp32 per rank (kv_row).
  const auto& c = group_->model.config;
  const std::vector<size_t> full_heads(size_t(c.num_layers - c.num_sliding_layers()), size_t(c.head_dim) * 4),
      sliding_heads(size_t(c.num_sliding_layers()), size_t(c.head_dim) * 4);
  const int from = kv.ranks, to = int(ranks_.size()), heads = int(c.num_kv_heads);
  write_pages(
      reshard_kv(full, from, to, heads, int64_t(full_pages.size()), spec_.page_size, full_heads),
      reshard_kv(sliding, from, to, heads, int64_t(sliding_pages.size()), spec_.page_size, sliding_heads),
      full_pages, sliding_pages);
}

void CpuBackend::write_pages(std::span<const uint8_t> full_bytes, std::span<const uint8_t> sliding_bytes,
                             std::span<const int32_t> full_pages, std::span<const int32_t> sliding_pages) {
  const auto& c = group_->model.config;
  size_t at_full = 0, at_sliding = 0;
  for (const auto& r : ranks_) {
    const size_t bytes = size_t(r->cfg.kv_dim()) * size_t(spec_.page_size) * sizeof(float);
    for (int64_t l = 0; l < c.num_layers; ++l) {
      const bool sliding = c.is_sliding(l);
      const std::span<const int32_t> pages = sliding ? sliding_pages : full_pages;
      const std::span<const uint8_t> in = sliding ? sliding_bytes : full_bytes;
      size_t& at = sliding ? at_sliding : at_full;
      const int32_t pool = sliding ? spec_.num_sliding_pages : spec_.num_full_pages;
      for (bool key : {true, false}) {
        for (int32_t page : pages) {
          ORCHID_CHECK(page == kNoPage || (page >= 0 && page < pool), "page {} outside the pool", page);
          if (at + bytes > in.size()) fail("K/V handed over is truncated ({} bytes)", in.size());
          if (page != kNoPage) std::memcpy(r->kv_row(key, l, page, 0), in.data() + at, bytes);
          at += bytes;
        }
      }
    }
  }
  if (at_full != full_bytes.size() || at_sliding != sliding_bytes.size())
    fail("K/V handed over has {} + {} bytes, {} + {} expected", full_bytes.size(), sliding_bytes.size(),
         at_full, at_sliding);
}

std::string CpuBackend::kv_share_transport() const {
  return supports_kv_handoff() ? "shm" : "";
}

std::optional<KvPages> CpuBackend::share_kv(std::span<const int32_t> full_pages,
                                            std::span<const int32_t> sliding_pages,
                                            int32_t first_sliding_page, int32_t num_tokens, int32_t) {
  if (share_bytes_ == 0 || !supports_kv_handoff()) return std::nullopt;
  // The bytes read_kv gives, copied into the export object under a lease.
  KvPages kv = read_kv(full_pages, sliding_pages, first_sliding_page, num_tokens);
  std::lock_guard<std::mutex> lock(share_mu_);
  if (!export_) {
    remove_stale_exports();
    // The object's pages come out of /dev/shm's tmpfs as they are written, and writing past what it has
    // left kills the process (SIGBUS): the buffer takes at most half of what is free now.
    struct statvfs fs {};
    const uint64_t free_bytes =
        ::statvfs("/dev/shm", &fs) == 0 ? uint64_t(fs.f_bavail) * uint64_t(fs.f_frsize) : 0;
    const uint64_t bytes = std::min<uint64_t>(share_bytes_, free_bytes / 2);
    if (bytes == 0) {
      spdlog::warn("K/V export: /dev/shm has {} MB free; K/V go as bytes", free_bytes >> 20);
      share_bytes_ = 0;
      return std::nullopt;
    }
    if (bytes < share_bytes_)
      spdlog::warn("K/V export: {} MB of /dev/shm instead of {} MB (half of what is free)", bytes >> 20,
                   share_bytes_ >> 20);
    static std::atomic<int> made{0};
    export_ = SharedMemory::create(fmt::format("/orchid-kv-{}-{}", ::getpid(), made.fetch_add(1)), bytes);
    leases_ = std::make_unique<KvShareLeases>(bytes, std::chrono::milliseconds(share_timeout_ms_));
  }
  const auto lease = leases_->acquire(kv.full.size() + kv.sliding.size(), steady_now_ms());
  if (!lease) return std::nullopt;  // no room: the pages go as bytes
  std::memcpy(export_->data() + lease->offset, kv.full.data(), kv.full.size());
  std::memcpy(export_->data() + lease->offset + kv.full.size(), kv.sliding.data(), kv.sliding.size());
  auto share = std::make_shared<KvShare>();
  share->transport = "shm";
  share->lease = lease->id;
  share->expires_ms = lease->expires_ms;
  share->ranks.push_back({export_->name(), lease->offset, kv.full.size(), kv.sliding.size()});
  kv.full.clear();
  kv.full.shrink_to_fit();
  kv.sliding.clear();
  kv.sliding.shrink_to_fit();
  kv.share = std::move(share);
  return kv;
}

bool CpuBackend::release_kv_share(uint64_t lease) {
  std::lock_guard<std::mutex> lock(share_mu_);
  return leases_ && leases_->release(lease);
}

size_t CpuBackend::kv_share_leases() const {
  std::lock_guard<std::mutex> lock(share_mu_);
  return leases_ ? leases_->leases() : 0;
}

void CpuBackend::open_kv_share(const KvShare& share) {
  shared_range(share);
}

const KvShareRank& CpuBackend::shared_range(const KvShare& share) {
  if (share.transport != "shm") fail("K/V shared over {}; this instance takes shm", share.transport);
  if (share.ranks.size() != 1)
    fail("K/V shared in {} parts; the CPU backend's come in one", share.ranks.size());
  const KvShareRank& r = share.ranks[0];
  if (r.region.rfind("/orchid-kv-", 0) != 0)
    fail("K/V shared in '{}', which is not an orchid export object", r.region);
  std::lock_guard<std::mutex> lock(share_mu_);
  auto it = peers_.find(r.region);
  if (it == peers_.end()) it = peers_.emplace(r.region, SharedMemory::open(r.region)).first;
  if (r.offset > it->second.size() || it->second.size() - r.offset < r.full_bytes + r.sliding_bytes)
    fail("K/V shared: bytes {}..{} outside the {} bytes of {}", r.offset,
         r.offset + r.full_bytes + r.sliding_bytes, it->second.size(), r.region);
  return r;
}

// Export objects of this machine's orchid processes that are gone (killed before they could unlink them):
// removed when this process makes its own, so a crashed prefill instance leaves nothing behind for long.
void CpuBackend::remove_stale_exports() {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm", ec)) {
    const std::string name = e.path().filename().string();
    int pid = 0;
    if (std::sscanf(name.c_str(), "orchid-kv-%d-", &pid) != 1 || pid <= 0 || pid == ::getpid()) continue;
    if (::kill(pid, 0) != 0 && errno == ESRCH) ::shm_unlink(("/" + name).c_str());
  }
}

void CpuBackend::on_ranks(const std::function<void(Rank&)>& fn) {
  run_on_rank_threads(
      ranks_.size(), [&](size_t r) { fn(*ranks_[r]); },
      [&](size_t r) {
        if (ranks_[r]->tp_local) ranks_[r]->tp_local->abort();
        if (ranks_[r]->ep_local) ranks_[r]->ep_local->abort();
      });
}

void CpuBackend::validate(const StepBatch& b) const {
  validate_step(b, group_->model.config, spec_, group_->model.config.max_position_embeddings);
  for (const auto& s : b.seqs)
    if (s.num_propose > max_proposals())
      fail("{} proposals asked of a backend whose draft head proposes at most {}", s.num_propose,
           max_proposals());
}

void CpuBackend::Rank::layer_forward(int64_t l, const StepBatch& b, const std::vector<int32_t>& positions,
                                     std::vector<float>& x, std::vector<int32_t>* topk) {
  const auto& L = w.layers[size_t(l)];
  const int64_t n = b.num_tokens(), H = full->hidden_size, qd = cfg.q_dim(), kvd = cfg.kv_dim();
  const bool sliding = full->is_sliding(l);
  const float eps = float(full->rms_norm_eps);

  std::vector<float> h(size_t(n * H)), q(size_t(n * qd)), k(size_t(n * kvd)), v(size_t(n * kvd));
  rms_norm(x.data(), n, H, L.input_norm.data(), eps, h.data());
  linear(h.data(), n, L.q, L.q_bias.data(), q.data());
  linear(h.data(), n, L.k, L.k_bias.data(), k.data());
  linear(h.data(), n, L.v, L.v_bias.data(), v.data());
  apply_rope(q.data(), n, cfg.num_heads, cfg.head_dim, positions, *rope);
  apply_rope(k.data(), n, cfg.num_kv_heads, cfg.head_dim, positions, *rope);

  // Write every new token's K/V first, so a prefill chunk's queries see the chunk's earlier keys.
  std::vector<float> attn(size_t(n * qd));
  for (const auto& s : b.seqs) {
    const int32_t* table = sliding ? b.sliding_page_table.data() + s.sliding_table_begin
                                   : b.full_page_table.data() + s.full_table_begin;
    auto page_of = [&](int64_t pos) {
      const int32_t page = table[pos / spec.page_size];
      if (page == kNoPage)
        ORCHID_CHECK(false, "position {} of sequence {} has no page (layer {})", pos, s.seq_id, l);
      return page;
    };
    for (int64_t i = 0; i < s.num_tokens; ++i) {
      const int64_t t = s.token_begin + i, pos = s.start_pos + i;
      const int32_t page = page_of(pos);
      store_kv(true, l, page, pos % spec.page_size, k.data() + t * kvd);
      store_kv(false, l, page, pos % spec.page_size, v.data() + t * kvd);
    }
    if (s.num_tokens == 0) continue;
    const int64_t window = sliding ? full->sliding_window : 0;
    const int64_t last = s.start_pos + s.num_tokens - 1;
    const int64_t first = window > 0 ? std::max<int64_t>(0, s.start_pos - window + 1) : 0;
    GatheredKv kv;
    kv.k.assign(size_t(last + 1), nullptr);
    kv.v.assign(size_t(last + 1), nullptr);
    for (int64_t pos = first; pos <= last; ++pos) {
      const int32_t page = page_of(pos);
      kv.k[size_t(pos)] = kv_row(true, l, page, pos % spec.page_size);
      kv.v[size_t(pos)] = kv_row(false, l, page, pos % spec.page_size);
    }
    sink_attention(q.data() + int64_t(s.token_begin) * qd, s.num_tokens, s.start_pos, cfg, window,
                   L.sinks.data(), kv, attn.data() + int64_t(s.token_begin) * qd);
  }
  // O is row-parallel: each rank's heads give a partial sum; the bias enters on one rank.
  std::vector<float> o(size_t(n * H));
  linear(attn.data(), n, L.o, shard.adds_o_bias ? L.o_bias.data() : nullptr, o.data());
  tp->all_reduce_sum(o.data(), o.size());
  for (size_t i = 0; i < x.size(); ++i) x[i] += o[i];

  rms_norm(x.data(), n, H, L.post_norm.data(), eps, h.data());
  moe_block(L, h, n, o, topk);
  for (size_t i = 0; i < x.size(); ++i) x[i] += o[i];
}

void CpuBackend::Rank::share_counts(int64_t n) {
  if (!moe_gathers) return;
  const auto H = size_t(full->hidden_size);
  ep_rows = ep->all_gather_counts(size_t(n));
  ep_bytes.clear();
  ep_floats.clear();
  for (size_t rows : ep_rows) {
    ep_bytes.push_back(rows * H * sizeof(float));
    ep_floats.push_back(rows * H);
  }
  ep_row_begin = 0;
  for (int q = 0; q < ep->rank(); ++q) ep_row_begin += ep_rows[size_t(q)];
}

void CpuBackend::Rank::moe_block(const LayerWeights& L, const std::vector<float>& h, int64_t n,
                                 std::vector<float>& out, std::vector<int32_t>* topk) {
  if (!moe_gathers) {
    // Every rank of the EP group has the same tokens: each runs its experts, the parts add up.
    moe(h.data(), n, *full, L, out.data(), topk, shard.expert_begin, shard.expert_end);
    ep->all_reduce_sum(out.data(), out.size());
    return;
  }
  // The group's ranks belong to several replicas: gather everyone's tokens, run this rank's experts on all
  // of them, and take back the sum over the group of this rank's own rows. (Ranks of one replica in the
  // group bring the same rows: each gets its copy of the result, bitwise equal.)
  ORCHID_CHECK(ep_rows.size() == size_t(ep->size()) && ep_rows[size_t(ep->rank())] == size_t(n),
               "share_counts was not called for this step's {} tokens", n);
  const int64_t H = full->hidden_size;
  int64_t total = 0;
  for (size_t rows : ep_rows) total += int64_t(rows);
  std::vector<float> all_h(size_t(total * H)), part(size_t(total * H));
  ep->all_gather_v(h.data(), ep_bytes, all_h.data());
  std::vector<int32_t> all_topk;
  moe(all_h.data(), total, *full, L, part.data(), topk ? &all_topk : nullptr, shard.expert_begin,
      shard.expert_end);
  ep->reduce_scatter_v(part.data(), ep_floats, out.data());
  if (topk) {
    const auto K = size_t(full->experts_per_token);
    topk->assign(all_topk.begin() + long(ep_row_begin * K),
                 all_topk.begin() + long((ep_row_begin + size_t(n)) * K));
  }
}

void CpuBackend::Rank::forward(const StepBatch& b, const std::vector<int32_t>& positions,
                               const std::vector<int64_t>& rows, std::vector<float>& logits,
                               const std::vector<int64_t>* aux_layers, std::vector<float>* aux) {
  const int64_t n = b.num_tokens(), H = full->hidden_size, V = full->vocab_size;
  share_counts(n);
  std::vector<float> x(size_t(n * H));
  for (int64_t t = 0; t < n; ++t)
    w.embedding.rows_f32(b.tokens[size_t(t)], b.tokens[size_t(t)] + 1, x.data() + t * H);
  const size_t num_aux = aux_layers ? aux_layers->size() : 0;
  if (aux) aux->assign(size_t(n) * num_aux * size_t(H), 0.0f);
  auto capture = [&](int64_t l) {
    for (size_t i = 0; aux && i < num_aux; ++i)
      if ((*aux_layers)[i] == l)
        for (int64_t t = 0; t < n; ++t)
          std::copy_n(x.data() + t * H, H, aux->data() + (size_t(t) * num_aux + i) * size_t(H));
  };
  for (int64_t l = 0; l < full->num_layers; ++l) {
    capture(l);
    layer_forward(l, b, positions, x, nullptr);
  }
  capture(full->num_layers);

  // Final norm and lm_head only on the rows that need logits; lm_head is vocab-parallel.
  const size_t R = rows.size();
  std::vector<float> xr(R * size_t(H)), normed(R * size_t(H));
  for (size_t r = 0; r < R; ++r) std::copy_n(x.data() + rows[r] * H, H, xr.data() + r * size_t(H));
  rms_norm(xr.data(), int64_t(R), H, w.final_norm.data(), float(full->rms_norm_eps), normed.data());
  const int64_t Vl = w.lm_head.rows;
  if (tp->size() == 1) {
    logits.resize(R * size_t(V));
    linear(normed.data(), int64_t(R), w.lm_head, nullptr, logits.data());
    return;
  }
  std::vector<float> mine(R * size_t(Vl)), all(size_t(tp->size()) * mine.size());
  linear(normed.data(), int64_t(R), w.lm_head, nullptr, mine.data());
  tp->all_gather(mine.data(), mine.size() * sizeof(float), all.data());
  logits.resize(R * size_t(V));
  for (int p = 0; p < tp->size(); ++p)  // rank p holds vocabulary rows [p * Vl, (p + 1) * Vl)
    for (size_t r = 0; r < R; ++r)
      std::copy_n(all.data() + (size_t(p) * R + r) * size_t(Vl), Vl,
                  logits.data() + r * size_t(V) + size_t(p * Vl));
}

std::vector<float> CpuBackend::run_layer(int64_t layer, const std::vector<float>& x, int64_t n,
                                         std::vector<int32_t>* topk) {
  const auto& c = group_->model.config;
  StepBatch b;
  refuse_in_step(/*one_layer=*/true, [&] {
    if (layer < 0 || layer >= c.num_layers) fail("layer {} is outside [0, {})", layer, c.num_layers);
    ORCHID_CHECK(int64_t(x.size()) == n * c.hidden_size);
    b = single_sequence_batch(spec_, int32_t(n));
    validate(b);
  });
  std::vector<int32_t> positions(static_cast<size_t>(n));
  for (int64_t t = 0; t < n; ++t) positions[size_t(t)] = int32_t(t);
  if (process_group_) {
    std::vector<char> m;
    put(m, WorkerOp::kRunLayer);
    put(m, layer);
    put(m, x);
    put(m, n);
    put(m, int32_t(topk != nullptr));
    send_to_workers(*process_group_, std::move(m));
  }
  std::vector<float> y;
  on_ranks([&](Rank& r) {
    std::vector<float> mine = x;
    std::vector<int32_t> chosen;
    r.share_counts(n);
    r.layer_forward(layer, b, positions, mine, topk ? &chosen : nullptr);
    if (&r == ranks_[0].get()) {
      y = std::move(mine);
      if (topk) *topk = std::move(chosen);
    }
  });
  return y;
}

void CpuBackend::step_layout(const StepBatch& b, std::vector<int32_t>& positions,
                             std::vector<int64_t>& rows) {
  const int64_t n = b.num_tokens();
  positions.assign(static_cast<size_t>(n), 0);
  for (const auto& s : b.seqs)
    for (int32_t i = 0; i < s.num_tokens; ++i) positions[size_t(s.token_begin + i)] = s.start_pos + i;
  rows.clear();
  if (b.logits == LogitsMode::kAll) {
    for (int64_t t = 0; t < n; ++t) rows.push_back(t);
  } else {
    for (const auto& s : b.seqs)
      if (s.sample && s.num_tokens > 0)
        for (int32_t i = s.num_draft; i >= 0; --i) rows.push_back(s.token_begin + s.num_tokens - 1 - i);
  }
}

void CpuBackend::refuse_in_step(bool one_layer, const std::function<void()>& checks) {
  if (lockstep_ == 1) return checks();
  try {
    checks();
  } catch (...) {
    // The other replicas are in this step's collectives already: take part with nothing, then refuse.
    const std::exception_ptr refused = std::current_exception();
    try {
      const StepBatch none;
      on_ranks([&](Rank& r) {
        std::vector<float> nothing;
        if (one_layer) {
          r.share_counts(0);
          r.layer_forward(0, none, {}, nothing, nullptr);
        } else {
          r.forward(none, {}, {}, nothing);
        }
      });
    } catch (const std::exception& e) {
      spdlog::error("cpu backend: replica {}: the empty step after a refused batch failed: {}", replica_,
                    e.what());
    }
    std::rethrow_exception(refused);
  }
}

StepOutput CpuBackend::forward(const StepBatch& b) {
  refuse_in_step(/*one_layer=*/false, [&] { validate(b); });
  const int64_t n = b.num_tokens(), V = group_->model.config.vocab_size;
  StepOutput out;
  std::vector<int32_t> positions;
  std::vector<int64_t> rows;
  step_layout(b, positions, rows);
  if (process_group_) send_to_workers(*process_group_, encode_batch(WorkerOp::kForward, b));
  std::vector<float> logits, aux;
  on_ranks([&](Rank& r) {
    std::vector<float> mine;
    // Every rank's hidden states are the whole model's after each all-reduce: rank 0's serve the head.
    const bool first = &r == ranks_[0].get();  // the replica's TP rank 0
    const bool head = head_ && first;
    r.forward(b, positions, rows, mine, head ? &head_->config().aux_layers : nullptr, head ? &aux : nullptr);
    if (first) logits = std::move(mine);
  });

  b.wait_token_masks();
  const bool drafted =
      std::any_of(b.seqs.begin(), b.seqs.end(), [](const StepSequence& s) { return s.num_draft > 0; });
  for (size_t i = 0; i < b.seqs.size(); ++i) {
    const StepSequence& s = b.seqs[i];
    if (!s.sample) continue;
    ORCHID_CHECK(s.num_tokens > 0, "cannot sample a sequence with no new tokens");
    // The sampled positions' rows are consecutive in `rows` (step_layout).
    const int64_t first_token = s.token_begin + s.num_tokens - 1 - s.num_draft;
    const size_t r = size_t(std::find(rows.begin(), rows.end(), first_token) - rows.begin());
    const std::span<const float> span(logits.data() + r * size_t(V), size_t(V) * size_t(s.num_draft + 1));
    const int32_t accepted = sample_sequence(b, s, span, out.samples);
    if (drafted) out.num_accepted.push_back(accepted);
  }
  if (head_) run_head(b, aux, out);
  if (b.logits == LogitsMode::kAll) {
    out.logits = std::move(logits);
    out.logits_rows = n;
  } else if (b.logits == LogitsMode::kSampled) {
    out.logits = std::move(logits);
    out.logits_rows = int64_t(rows.size());
  }
  return out;
}

void CpuBackend::run_head(const StepBatch& b, const std::vector<float>& aux, StepOutput& out) {
  const int64_t W = head_->aux_width(), H = head_->config().hidden_size;
  for (Eagle3SeqRows& r : pending_rows_.plan(b, out)) {
    const StepSequence& s = b.seqs[r.seq];
    std::vector<float> g = r.pending_g ? std::move(*r.pending_g) : std::vector<float>();
    if (r.step_rows > 0) {
      const std::vector<float> combined =
          head_->combine(aux.data() + size_t(r.step_row_begin) * size_t(W), r.step_rows);
      g.insert(g.end(), combined.begin(), combined.end());
    }
    if (r.keep_row >= 0)
      pending_rows_.keep(b, r, head_->combine(aux.data() + size_t(r.keep_row) * size_t(W), 1));
    const std::span<const int32_t> table(b.full_page_table.data() + s.full_table_begin,
                                         size_t(s.num_full_pages));
    std::vector<float> pre;
    if (r.rows() > 0) pre = head_->catch_up(g, r.next, r.first_pos, table);
    if (!s.sample) continue;
    std::vector<int32_t> drafts;
    if (r.propose > 0)  // draft j is the token at output index sample_index + 1 + accepted + j of the request
      drafts = head_->draft(std::vector<float>(pre.end() - H, pre.end()), r.last_pos(), r.propose, table,
                            b.params[size_t(s.params_index)], s.sample_index + 1 + r.accepted);
    out.num_proposals.push_back(int32_t(drafts.size()));
    out.proposals.insert(out.proposals.end(), drafts.begin(), drafts.end());
  }
}

}  // namespace orchid::runtime::cpu
