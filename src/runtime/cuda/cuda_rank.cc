#include "runtime/cuda/cuda_rank.h"

#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <span>
#include <string>

#include "core/error.h"
#include "kernels/attention/kv_layout.h"
#include "kernels/attention/precise_attention.h"
#include "kernels/attention/qkv_rope_gemm.h"
#include "kernels/attention/sink_attention.h"
#include "kernels/attention/yarn.h"
#include "kernels/common/cuda_check.h"
#include "kernels/common/device_info.h"
#include "kernels/eagle3/eagle3_ops.h"
#include "kernels/norm/rmsnorm.h"
#include "kernels/ops/ops.h"
#include "runtime/graph_buckets.h"
#include "runtime/kv_memory_plan.h"
#include "runtime/kv_reshard.h"
#include "runtime/sampler.h"

namespace orchid::runtime::cuda {

namespace attn = kernels::attention;

namespace {
int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}
size_t align256(size_t v) {
  return (v + 255) / 256 * 256;
}
constexpr int64_t kLogitsRowsPerPass = 256;  // lm_head rows per pass when every position's logits are wanted
}  // namespace

CudaRank::CudaRank(const CudaRankSetup& st)
    : opts_(st.opts),
      config_(st.config),
      local_(st.config),
      shard_(st.shard),
      device_(st.device),
      budget_(st.memory_budget),
      tp_(st.tp),
      ep_(st.ep),
      samples_(st.shard.rank == 0) {
  ORCHID_CUDA_CHECK(cudaSetDevice(device_));
  local_.num_heads = shard_.num_q_heads();
  local_.num_kv_heads = shard_.num_kv_heads();
  plan_options_ = make_plan_options();
  graphs_ok_ = opts_.cuda_graphs && tp_->capturable() && ep_->capturable();
  ORCHID_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));

  const auto format = parse_weight_format(opts_.weights);
  moe_cfg_.hidden = int(config_.hidden_size);
  moe_cfg_.inter = int(config_.intermediate_size);
  moe_cfg_.experts = int(config_.num_experts);
  moe_cfg_.top_k = int(config_.experts_per_token);
  moe_cfg_.swiglu_limit = float(config_.swiglu_limit);
  moe_cfg_.swiglu_alpha = float(config_.swiglu_alpha);
  moe_cfg_.weights = format;
  moe_cfg_.max_tokens = opts_.max_step_tokens;
  // For comparisons: the token count up to which the tiled MXFP4 kernel runs instead of the FP8 conversion.
  if (const char* v = std::getenv("ORCHID_MXFP4_TILED_MAX_TOKENS"))
    moe_cfg_.mxfp4_tiled_max_tokens = std::atoi(v);
  // For comparisons: the tiled down GEMM's CTA rows (128 or 256; unset, as gate_up).
  if (const char* v = std::getenv("ORCHID_MXFP4_DOWN_ROWS")) moe_cfg_.mxfp4_down_rows = std::atoi(v);
  // For comparisons: ORCHID_MXFP4_W4A8=0 converts the used experts to FP8 in MXFP4 prefill-sized steps
  // instead of the W4A8 GEMM (the default).
  if (const char* v = std::getenv("ORCHID_MXFP4_W4A8")) moe_cfg_.mxfp4_w4a8 = std::strcmp(v, "0") != 0;
  // For comparisons: the W4A8 GEMM's grid (0 persistent, the default; 1048576: one CTA a work item).
  if (const char* v = std::getenv("ORCHID_MXFP4_W4A8_CTAS")) moe_cfg_.mxfp4_w4a8_ctas = std::atoi(v);
  if (shard_.num_experts() < config_.num_experts)
    moe_cfg_.local = kernels::MoeExpertRange{int(shard_.expert_begin), int(shard_.num_experts())};

  // MXFP4 experts repacked (faster expert GEMMs, 2.2% more expert bytes) unless the KV cache would then fall
  // short where the checkpoint's form leaves it enough (gpt-oss-120b on an 80 GB GPU: 1.26 GiB).
  bool repack = format == kernels::MoeWeights::kMxfp4 && DeviceWeights::mxfp4_repack_requested();
  size_t wbytes = DeviceWeights::bytes_needed(config_, format, shard_, repack);
  if (repack) {
    const size_t rest = plan_workspace(false) + size_t(opts_.kv_share_bytes);
    auto kv_fits = [&](size_t weights) {
      try {
        const KvPoolPlan p = plan_kv(opts_.kv_cache_dtype, opts_.kv_pages, weights + rest);
        return weights + rest + p.bytes <= budget_;
      } catch (const Error&) {
        return false;
      }
    };
    const size_t compact = DeviceWeights::bytes_needed(config_, format, shard_, false);
    if (!kv_fits(wbytes) && kv_fits(compact)) {
      spdlog::warn(
          "MXFP4 experts kept in the checkpoint's layout: the repacked one's {:.2f} GiB more would leave too "
          "little for the KV cache (slower expert GEMMs; a higher --gpu-memory-utilization keeps the repack)",
          double(wbytes - compact) / (1 << 30));
      repack = false;
      wbytes = compact;
    }
  }
  if (wbytes > budget_)
    fail(
        "{} with --weights {} needs {:.1f} GiB for weights on each GPU rank; a rank may use {:.1f} GiB (try "
        "--weights mxfp4, more ranks, or a higher --gpu-memory-utilization)",
        config_.name, opts_.weights, double(wbytes) / (1 << 30), double(budget_) / (1 << 30));
  weights_ = DeviceWeights::load(st.ref, config_, format, stream_, shard_, repack);
  moe_cfg_.mxfp4_tiled_order = weights_.mxfp4_tiled_order;

  const auto rope = attn::yarn_inv_freq(config_);
  for (size_t j = 0; j < 32; ++j) rope_.inv_freq[j] = rope.inv_freq[j];
  rope_.concentration = rope.concentration;
  plan_workspace(true);
  if (opts_.kv_share_bytes > 0) {  // before the KV pools: the memory plan counts it as allocated
    share_ = DeviceBuffer(size_t(opts_.kv_share_bytes), "K/V export buffer (--kv-share-buffer)");
    cudaIpcMemHandle_t h;
    ORCHID_CUDA_CHECK(cudaIpcGetMemHandle(&h, share_.data()));
    const uint64_t size = share_.size();
    share_region_.assign(reinterpret_cast<const char*>(&h), sizeof(h));
    share_region_.append(reinterpret_cast<const char*>(&size), sizeof(size));
  }
  if (!opts_.eagle3_head.empty() && samples_) {
    model::Eagle3Head head = model::load_eagle3_head(opts_.eagle3_head, config_);
    CudaEagle3Head::check_supported(head.config);
    CudaEagle3Sizes hs;
    hs.max_step_tokens = opts_.max_step_tokens;
    hs.max_step_seqs = opts_.max_step_seqs;
    hs.max_proposals = std::max(1, opts_.max_draft_tokens);
    hs.page_size = opts_.page_size;
    hs.max_pages_per_seq = ceil_div(opts_.max_model_len, opts_.page_size);
    const size_t bytes = CudaEagle3Head::bytes_needed(head.config, hs);
    if (weights_.arena.used() + ws_.capacity() + bytes > budget_)
      fail(
          "the EAGLE-3 head needs {:.2f} GiB next to {:.2f} GiB of weights and workspace in a {:.2f} GiB "
          "rank",
          double(bytes) / (1 << 30), double(weights_.arena.used() + ws_.capacity()) / (1 << 30),
          double(budget_) / (1 << 30));
    spdlog::info("cuda backend: EAGLE-3 head {} (aux layers {}, draft vocabulary {}), {:.2f} GiB",
                 opts_.eagle3_head, fmt::join(head.config.aux_layers, ", "), head.config.draft_vocab_size,
                 double(bytes) / (1 << 30));
    head_ = std::make_unique<CudaEagle3Head>(std::move(head), weights_.embedding, hs, stream_);
  }
}

namespace {
// CUDA IPC mappings of peers' export buffers, one per (device, region) in the process: the ranks of a split
// that share a GPU (tests, --collectives local) read the same sender buffer, and a handle must not be
// opened twice in one context. Counted: the last rank that let go closes it.
struct IpcMapping {
  uint8_t* base = nullptr;
  uint64_t size = 0;
  int users = 0;
};
std::mutex ipc_mu;
std::map<std::pair<int, std::string>, IpcMapping>& ipc_mappings() {
  static std::map<std::pair<int, std::string>, IpcMapping> m;
  return m;
}
}  // namespace

CudaRank::~CudaRank() {
  cudaSetDevice(device_);
  if (stream_) cudaStreamSynchronize(stream_);
  {
    std::lock_guard<std::mutex> lock(ipc_mu);
    for (const auto& [region, mapping] : peers_) {
      auto it = ipc_mappings().find({device_, region});
      if (it != ipc_mappings().end() && --it->second.users == 0) {
        cudaIpcCloseMemHandle(it->second.base);
        ipc_mappings().erase(it);
      }
    }
  }
  for (auto& [bucket, exec] : graphs_) cudaGraphExecDestroy(exec);
  gemm_.reset();
  sampler_.reset();
  if (h_meta_) cudaFreeHost(h_meta_);
  if (staged_) cudaEventDestroy(staged_);
  for (auto e : done_)
    if (e) cudaEventDestroy(e);
  if (stream_) cudaStreamDestroy(stream_);
}

size_t CudaRank::plan_workspace(bool allocate) {
  const auto& c = local_;  // attention sizes are this rank's
  const int64_t T = opts_.max_step_tokens, S = opts_.max_step_seqs, H = c.hidden_size;
  const int64_t qkv_dim = c.q_dim() + 2 * c.kv_dim();
  const int64_t V = c.vocab_size, Vl = shard_.vocab_end - shard_.vocab_begin;
  const bool tp = tp_->size() > 1, ep = ep_->size() > 1;
  // Sampled rows: one per sequence, and one more per draft.
  sampled_rows_cap_ = S * (1 + int64_t(opts_.max_draft_tokens));
  logits_rows_cap_ = std::max<int64_t>(sampled_rows_cap_, kLogitsRowsPerPass);
  // The attention workspace: decode split-KV states, or a prefill step's split tiles' partial results.
  const size_t attn_ws = std::max(attn::decode_workspace_bound(int(S), plan_options_),
                                  attn::prefill_workspace_bound(plan_options_));
  const int64_t max_pages_per_seq = ceil_div(opts_.max_model_len, opts_.page_size);
  // Step metadata: tokens, the attention plan, the logits row index, both page tables; fixed offsets.
  cap_tokens_ = size_t(T) * 4;
  cap_blob_ = std::max(size_t(8 * S + 4 * T + 64) * 4, attn::plan_blob_bound(int(T), int(S), plan_options_));
  cap_rows_ = size_t(std::max<int64_t>(T, sampled_rows_cap_)) * 4;
  cap_table_ = size_t(S * max_pages_per_seq) * 4 * 2;  // the engine's tables keep room to grow
  off_tokens_ = 0;
  off_blob_ = off_tokens_ + align256(cap_tokens_);
  off_rows_ = off_blob_ + align256(cap_blob_);
  off_full_ = off_rows_ + align256(cap_rows_);
  off_sliding_ = off_full_ + align256(cap_table_);
  cap_prev_ = size_t(S) * 8;  // a (token, sample) pair per sequence: pipelined steps decode one token each
  off_prev_ = off_sliding_ + align256(cap_table_);
  meta_cap_ = off_prev_ + align256(cap_prev_);
  // Precise routing: the norm outputs keep their low BF16 halves (h_ holds 2T rows), and the precise
  // layer's QKV rows (then its O-projection output) are fp32.
  precise_layer_ = opts_.precise_routing && c.num_layers > 0 && c.is_sliding(0) ? 0 : -1;
  const bool precise = precise_layer_ >= 0;
  const size_t qkv_bytes = precise ? size_t(T * std::max(qkv_dim, H)) * 4 : size_t(T * qkv_dim) * 2;
  const size_t h_rows = size_t(opts_.precise_routing ? 2 * T : T);
  const size_t ws_bytes =
      align256(size_t(T * H) * 4) + align256(h_rows * size_t(H) * 2) + align256(qkv_bytes) +
      2 * align256(size_t(T * c.q_dim()) * 2) + align256(size_t(T * H) * 2) +
      (tp ? align256(size_t(T * H) * 4) : 0) + (ep ? align256(size_t(T * H) * 4) : 0) +
      align256(kernels::moe_workspace_bytes(moe_cfg_)) + align256(attn_ws) +
      align256(kernels::DenseGemm::kRecommendedWorkspace) + align256(size_t(logits_rows_cap_ * H) * 4) +
      align256(size_t(logits_rows_cap_ * H) * 2) + align256(size_t(logits_rows_cap_ * V) * 4) +
      (tp ? 2 * align256(size_t(logits_rows_cap_ * V) * 4) : 0) +
      2 * align256(size_t(sampled_rows_cap_) * 4) + meta_cap_ +
      (tp_->size() > 1 ? align256(size_t(tp_->size() + 1) * gather_block() * 4) : 0);
  if (!allocate) return ws_bytes;
  if (weights_.arena.used() + ws_bytes > budget_)
    fail(
        "the step workspace ({:.2f} GiB for --max-num-batched-tokens {}, --max-num-seqs {}) does not fit "
        "next to "
        "{:.2f} GiB of weights in a rank's {:.2f} GiB",
        double(ws_bytes) / (1 << 30), T, S, double(weights_.arena.used()) / (1 << 30),
        double(budget_) / (1 << 30));
  ws_ = DeviceArena(ws_bytes, "step workspace");
  x_ = ws_.take<float>(size_t(T * H));
  h_ = ws_.take<__nv_bfloat16>(h_rows * size_t(H));
  void* qkv = ws_.take_bytes(qkv_bytes);
  qkv_ = static_cast<__nv_bfloat16*>(qkv);
  qkv_f32_ = static_cast<float*>(qkv);
  q_ = ws_.take<__nv_bfloat16>(size_t(T * c.q_dim()));
  attn_ = ws_.take<__nv_bfloat16>(size_t(T * c.q_dim()));
  o_ = ws_.take<__nv_bfloat16>(size_t(T * H));
  if (tp) o_f32_ = ws_.take<float>(size_t(T * H));
  if (ep) moe_part_ = ws_.take<float>(size_t(T * H));
  moe_ws_ = ws_.take_bytes(kernels::moe_workspace_bytes(moe_cfg_));
  kernels::moe_workspace_init(moe_cfg_, moe_ws_, stream_);
  attn_ws_ = ws_.take_bytes(attn_ws);
  attn_ws_bytes_ = attn_ws;
  void* gemm_ws = ws_.take_bytes(kernels::DenseGemm::kRecommendedWorkspace);
  x_sel_ = ws_.take<float>(size_t(logits_rows_cap_ * H));
  h_sel_ = ws_.take<__nv_bfloat16>(size_t(logits_rows_cap_ * H));
  logits_ = ws_.take<float>(size_t(logits_rows_cap_ * V));
  if (tp) {
    logits_mine_ = ws_.take<float>(size_t(logits_rows_cap_ * Vl));
    logits_parts_ = ws_.take<float>(size_t(logits_rows_cap_ * V));
  }
  d_ids_ = ws_.take<int32_t>(size_t(sampled_rows_cap_));
  d_logprobs_ = ws_.take<float>(size_t(sampled_rows_cap_));
  d_meta_ = ws_.take_bytes(meta_cap_);
  if (tp_->size() > 1) d_gathered_ = ws_.take<int32_t>(size_t(tp_->size() + 1) * gather_block());
  gemm_ = std::make_unique<kernels::DenseGemm>(gemm_ws, kernels::DenseGemm::kRecommendedWorkspace);
  if (samples_) sampler_ = std::make_unique<GpuSampler>(sampled_rows_cap_, V);
  // Two result slots of ids and logprobs: a pipelined step's are read while the next step's are copied.
  ORCHID_CUDA_CHECK(
      cudaMallocHost(reinterpret_cast<void**>(&h_meta_), meta_cap_ + 2 * size_t(sampled_rows_cap_) * 8));
  h_ids_ = reinterpret_cast<int32_t*>(h_meta_ + meta_cap_);
  h_logprobs_ = reinterpret_cast<float*>(h_ids_ + 2 * sampled_rows_cap_);
  ORCHID_CUDA_CHECK(cudaEventCreateWithFlags(&staged_, cudaEventDisableTiming));
  for (auto& e : done_) ORCHID_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  int64_t full = 0, sliding = 0;
  for (int64_t l = 0; l < c.num_layers; ++l) layer_slot_.push_back(c.is_sliding(l) ? sliding++ : full++);
  return ws_bytes;
}

size_t CudaRank::kv_page_bytes(int64_t l, int32_t page_size) const {
  const size_t element = l == precise_layer_ ? 4 : size_t(kv_element_bytes(opts_.kv_cache_dtype));
  return size_t(local_.num_kv_heads) * size_t(page_size) * 64 * element;
}

// The KV pools' plan for a cache of either precision next to `allocated` bytes (the head's pages and the
// precise layer's stay as they are).
KvPoolPlan CudaRank::plan_kv(KvCacheDtype dtype, int32_t kv_pages, size_t allocated) const {
  const auto& c = local_;
  int64_t full = 0, sliding = 0;
  for (int64_t l = 0; l < c.num_layers; ++l) (c.is_sliding(l) ? sliding : full)++;
  const size_t element = size_t(kv_element_bytes(dtype));
  KvPoolInput in;
  in.budget = budget_;
  in.allocated = allocated;
  in.full_layers = full;
  in.page_layer_bytes = size_t(2) * size_t(c.num_kv_heads) * size_t(opts_.page_size) * 64 * element;
  if (head_) {  // the head's K/V: one more full layer (or the layers its page takes)
    const size_t head_page = CudaEagle3Head::page_bytes(head_->config(), opts_.page_size);
    in.allocated += head_->device_bytes();
    in.full_layers += int64_t((head_page + in.page_layer_bytes - 1) / in.page_layer_bytes);
  }
  // A precise layer's pools hold fp32: 4 / element sliding layers' worth.
  in.sliding_units = sliding + (precise_layer_ >= 0 ? int64_t(4 / element) - 1 : 0);
  in.page_size = opts_.page_size;
  in.sliding_window = c.sliding_window;
  in.max_step_tokens = opts_.max_step_tokens;
  in.max_step_seqs = opts_.max_step_seqs;
  in.max_model_len = opts_.max_model_len;
  in.kv_pages = kv_pages;
  return plan_kv_pools(in);
}

KvCacheSpec CudaRank::kv_capacity() const {
  const auto& c = local_;
  int64_t full = 0, sliding = 0;
  for (int64_t l = 0; l < c.num_layers; ++l) (c.is_sliding(l) ? sliding : full)++;
  const size_t allocated = weights_.arena.capacity() + ws_.capacity() + share_.size();
  auto plan_for = [&](KvCacheDtype dtype, int32_t kv_pages) { return plan_kv(dtype, kv_pages, allocated); };
  const KvPoolPlan p = plan_for(opts_.kv_cache_dtype, opts_.kv_pages);
  if (shard_.rank == 0 && opts_.kv_pages == 0) {
    // What each precision would hold on this budget (--kv-cache-dtype), in sequences of the longest
    // context. Sequences of 128k tokens are the long-context case (gpt-oss's 131072-token window).
    const int64_t longest = std::min<int64_t>(opts_.max_model_len, 131072);
    std::string both;
    for (KvCacheDtype d : {KvCacheDtype::kBf16, KvCacheDtype::kFp8E4M3}) {
      if (!both.empty()) both += "; ";
      try {
        const KvPoolPlan q = d == opts_.kv_cache_dtype ? p : plan_for(d, 0);
        both += fmt::format("{} {:.2f} GiB = {} tokens = {} sequences of {} tokens", kv_cache_dtype_name(d),
                            double(q.bytes) / (1 << 30), int64_t(q.full_pages) * opts_.page_size,
                            sequences_that_fit(q, opts_.page_size, longest), longest);
      } catch (const Error&) {  // the other precision may not fit where this one does
        both += fmt::format("{} does not fit", kv_cache_dtype_name(d));
      }
    }
    spdlog::info("KV cache by precision (--kv-cache-dtype {}): {}", kv_cache_dtype_name(opts_.kv_cache_dtype),
                 both);
  }
  KvCacheSpec spec;
  spec.page_size = opts_.page_size;
  spec.sliding_window = sliding > 0 ? int32_t(c.sliding_window) : 0;
  spec.num_sliding_pages = p.sliding_pages;
  spec.num_full_pages = p.full_pages;
  return spec;
}

void CudaRank::allocate_kv(const KvCacheSpec& spec) {
  ORCHID_CUDA_CHECK(cudaSetDevice(device_));
  const auto& c = local_;
  spec_ = spec;
  // One of K or V of layer l.
  auto pool_bytes = [&](int64_t l) {
    return size_t(c.is_sliding(l) ? spec_.num_sliding_pages : spec_.num_full_pages) *
           kv_page_bytes(l, spec_.page_size);
  };
  size_t total = 0;
  for (int64_t l = 0; l < c.num_layers; ++l) total += 2 * pool_bytes(l);
  kv_ = DeviceBuffer(total, "KV cache");
  if (head_) head_->allocate_kv(spec_.num_full_pages);
  uint8_t* p = kv_.data();
  k_pool_.clear();
  v_pool_.clear();
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const size_t bytes = pool_bytes(l);
    k_pool_.push_back(p);
    v_pool_.push_back(p + bytes);
    p += 2 * bytes;
  }
  if (shard_.rank == 0) {
    spdlog::info(
        "GPU memory{}: weights {:.2f} GiB, workspace {:.2f} GiB, KV {:.2f} GiB {} ({} full pages = {} "
        "tokens, "
        "{} sliding pages)",
        tp_->size() * ep_->size() > 1 ? " (rank 0)" : "", double(weights_.arena.used()) / (1 << 30),
        double(ws_.capacity()) / (1 << 30), double(kv_.size()) / (1 << 30),
        kv_cache_dtype_name(opts_.kv_cache_dtype), spec_.num_full_pages,
        int64_t(spec_.num_full_pages) * opts_.page_size, spec_.num_sliding_pages);
    if (kv_fp8() && opts_.hopper_prefill_attention)
      spdlog::info(
          "FP8 KV cache: prefill attention on the mma.sync kernel (the Hopper kernel reads BF16 pages)");
    if (opts_.precise_routing)
      spdlog::info("precise routing: router inputs at fp32 accuracy{} (--bf16-routing turns it off)",
                   precise_layer_ >= 0 ? ", layer 0's attention in fp32" : "");
  }
}

std::string CudaRank::kv_layout() const {
  const auto& c = config_;  // the whole model's heads: the rank split travels as KvPages::ranks
  return fmt::format(
      "cuda {} (layer {} fp32): {} layers ({} sliding), {} KV heads x 64, page {}; hidden {}, {} "
      "experts, vocabulary {}",
      kv_cache_dtype_name(opts_.kv_cache_dtype), precise_layer_, c.num_layers, c.num_sliding_layers(),
      c.num_kv_heads, spec_.page_size, c.hidden_size, c.num_experts, c.vocab_size);
}

void CudaRank::for_each_kv_page(
    std::span<const int32_t> full_pages, std::span<const int32_t> sliding_pages,
    const std::function<void(bool sliding, uint8_t* page, size_t bytes)>& fn) const {
  const auto& c = local_;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const bool is_sliding = c.is_sliding(l);
    const std::span<const int32_t> pages = is_sliding ? sliding_pages : full_pages;
    const int32_t pool = is_sliding ? spec_.num_sliding_pages : spec_.num_full_pages;
    const size_t bytes = kv_page_bytes(l, spec_.page_size);
    for (void* base : {k_pool_[size_t(l)], v_pool_[size_t(l)]}) {
      for (int32_t page : pages) {
        ORCHID_CHECK(page == kNoPage || (page >= 0 && page < pool), "page {} outside the pool", page);
        fn(is_sliding, page == kNoPage ? nullptr : static_cast<uint8_t*>(base) + size_t(page) * bytes, bytes);
      }
    }
  }
}

void CudaRank::read_pages(std::span<const int32_t> full_pages, std::span<const int32_t> sliding_pages,
                          std::vector<uint8_t>& full, std::vector<uint8_t>& sliding) {
  ORCHID_CUDA_CHECK(cudaSetDevice(device_));
  for_each_kv_page(full_pages, sliding_pages, [&](bool is_sliding, uint8_t* page, size_t bytes) {
    ORCHID_CHECK(page != nullptr, "reading a page that is not there");
    std::vector<uint8_t>& out = is_sliding ? sliding : full;
    const size_t at = out.size();
    out.resize(at + bytes);
    ORCHID_CUDA_CHECK(cudaMemcpyAsync(out.data() + at, page, bytes, cudaMemcpyDeviceToHost, stream_));
  });
  ORCHID_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaRank::write_pages(std::span<const int32_t> full_pages, std::span<const int32_t> sliding_pages,
                           const std::vector<uint8_t>& full, const std::vector<uint8_t>& sliding,
                           size_t& at_full, size_t& at_sliding) {
  ORCHID_CUDA_CHECK(cudaSetDevice(device_));
  for_each_kv_page(full_pages, sliding_pages, [&](bool is_sliding, uint8_t* page, size_t bytes) {
    const std::vector<uint8_t>& in = is_sliding ? sliding : full;
    size_t& at = is_sliding ? at_sliding : at_full;
    if (at + bytes > in.size()) fail("K/V handed over is truncated ({} bytes)", in.size());
    if (page)
      ORCHID_CUDA_CHECK(cudaMemcpyAsync(page, in.data() + at, bytes, cudaMemcpyHostToDevice, stream_));
    at += bytes;
  });
  // The host buffer must outlive the copies, and the next step must see the pages.
  ORCHID_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

std::string CudaRank::share_region() const {
  return share_region_;
}

std::pair<uint64_t, uint64_t> CudaRank::handoff_bytes(std::span<const int32_t> full_pages,
                                                      std::span<const int32_t> sliding_pages) const {
  uint64_t full = 0, sliding = 0;
  for (int64_t l = 0; l < local_.num_layers; ++l) {
    const uint64_t page = 2 * kv_page_bytes(l, spec_.page_size);  // K and V
    (local_.is_sliding(l) ? sliding : full) +=
        page * (local_.is_sliding(l) ? sliding_pages : full_pages).size();
  }
  return {full, sliding};
}

void CudaRank::copy_spans(const std::vector<kernels::ops::CopySpan>& spans) {
  ORCHID_CUDA_CHECK(cudaSetDevice(device_));
  const size_t bytes = spans.size() * sizeof(kernels::ops::CopySpan);
  if (bytes == 0) return;
  if (spans_.size() < bytes) spans_ = DeviceBuffer(std::max(bytes, spans_.size() * 2), "K/V copy list");
  ORCHID_CUDA_CHECK(cudaMemcpyAsync(spans_.data(), spans.data(), bytes, cudaMemcpyHostToDevice, stream_));
  kernels::ops::copy_spans(reinterpret_cast<const kernels::ops::CopySpan*>(spans_.data()),
                           int64_t(spans.size()), stream_);
  // The host list must outlive the upload, and a lease may end (a peer may reuse its range) right after.
  ORCHID_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaRank::share_pages(std::span<const int32_t> full_pages, std::span<const int32_t> sliding_pages,
                           uint64_t offset) {
  const auto [full_bytes, sliding_bytes] = handoff_bytes(full_pages, sliding_pages);
  ORCHID_CHECK(offset + full_bytes + sliding_bytes <= share_.size(), "lease past the export buffer");
  uint8_t* at[2] = {share_.data() + offset, share_.data() + offset + full_bytes};
  std::vector<kernels::ops::CopySpan> spans;
  for_each_kv_page(full_pages, sliding_pages, [&](bool is_sliding, uint8_t* page, size_t bytes) {
    ORCHID_CHECK(page != nullptr, "sharing a page that is not there");
    spans.push_back({page, at[is_sliding], bytes});
    at[is_sliding] += bytes;
  });
  copy_spans(spans);
}

void CudaRank::open_peer(const std::string& region) {
  cudaIpcMemHandle_t h;
  uint64_t size = 0;
  if (region.size() != sizeof(h) + sizeof(size))
    fail("K/V shared over CUDA IPC: a region of {} bytes is not a handle and size", region.size());
  std::lock_guard<std::mutex> lock(peers_mu_);
  if (peers_.count(region)) return;
  std::lock_guard<std::mutex> global(ipc_mu);
  IpcMapping& m = ipc_mappings()[{device_, region}];
  if (m.users == 0) {
    std::memcpy(&h, region.data(), sizeof(h));
    std::memcpy(&size, region.data() + sizeof(h), sizeof(size));
    ORCHID_CUDA_CHECK(cudaSetDevice(device_));
    void* p = nullptr;
    const cudaError_t err = cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess);
    if (err != cudaSuccess) {
      cudaGetLastError();  // not sticky, but leave no error behind for the next check
      ipc_mappings().erase({device_, region});
      fail("K/V shared over CUDA IPC: the peer's export buffer cannot be mapped on GPU {}: {}", device_,
           cudaGetErrorString(err));
    }
    m.base = static_cast<uint8_t*>(p);
    m.size = size;
  }
  ++m.users;
  peers_.emplace(region, std::make_pair(m.base, m.size));
}

std::vector<int> CudaRank::share_senders(int from) const {
  const int heads = int(config_.num_kv_heads), mine = int(local_.num_kv_heads);
  std::vector<int> senders;
  for (const HeadRun& r :
       head_runs(from, heads / mine, heads, int(shard_.kv_head_begin) / mine, uint64_t(mine)))
    senders.push_back(r.sender);
  return senders;
}

void CudaRank::take_shared_pages(std::span<const int32_t> full_pages, std::span<const int32_t> sliding_pages,
                                 const KvShare& share) {
  const int from = int(share.ranks.size()), heads = int(config_.num_kv_heads);
  const int mine = int(local_.num_kv_heads), to = heads / mine, me = int(shard_.kv_head_begin) / mine;
  const auto [full_bytes, sliding_bytes] = handoff_bytes(full_pages, sliding_pages);
  // Each sender rank's part holds its heads' blocks of the same pages: the receiver's bytes scaled.
  const uint64_t part[2] = {sender_page_bytes(from, to, full_bytes),
                            sender_page_bytes(from, to, sliding_bytes)};
  std::vector<const uint8_t*> base(size_t(from), nullptr);
  for (const HeadRun& r : head_runs(from, to, heads, me, uint64_t(mine))) {
    const KvShareRank& s = share.ranks[size_t(r.sender)];
    if (s.full_bytes != part[0] || s.sliding_bytes != part[1])
      fail("K/V shared: {} + {} bytes on sender rank {} of {}, {} + {} expected", s.full_bytes,
           s.sliding_bytes, r.sender, from, part[0], part[1]);
    open_peer(s.region);
    std::lock_guard<std::mutex> lock(peers_mu_);
    const auto& [mapping, size] = peers_.at(s.region);
    if (s.offset > size || size - s.offset < part[0] + part[1])
      fail("K/V shared: bytes {}..{} outside the peer's buffer of {}", s.offset, s.offset + part[0] + part[1],
           size);
    base[size_t(r.sender)] = mapping + s.offset;
  }
  // Walk this rank's pages in the handoff order; each sender's cursor advances by its own page.
  uint64_t at[2] = {0, part[0]};  // offsets in every sender's part: the full section, then the sliding one
  std::vector<kernels::ops::CopySpan> spans;
  std::map<uint64_t, std::vector<HeadRun>> runs;  // by page size (one per layer kind and precision)
  for_each_kv_page(full_pages, sliding_pages, [&](bool is_sliding, uint8_t* page, size_t bytes) {
    auto it = runs.find(bytes);
    if (it == runs.end()) it = runs.emplace(bytes, head_runs(from, to, heads, me, bytes)).first;
    if (page)
      for (const HeadRun& r : it->second)
        spans.push_back({base[size_t(r.sender)] + at[is_sliding] + r.src, page + r.dst, r.bytes});
    at[is_sliding] += sender_page_bytes(from, to, bytes);
  });
  copy_spans(spans);
}

void CudaRank::compute_logits(const int32_t* d_rows, int64_t rows) {
  const auto& c = config_;
  kernels::ops::gather_rows_f32(x_, d_rows, x_sel_, rows, c.hidden_size, stream_);
  kernels::norm::rmsnorm_residual(x_sel_, nullptr, weights_.final_norm, h_sel_, rows, c.hidden_size,
                                  float(c.rms_norm_eps), stream_);
  kernels::DenseGemmArgs g;
  g.m = int(rows);
  g.n = int(c.vocab_size);
  g.k = int(c.hidden_size);
  g.x = h_sel_;
  g.w = weights_.lm_head;
  g.y = logits_;
  g.out = kernels::GemmOut::kF32;
  if (tp_->size() == 1) return gemm_->run(g, stream_);
  // Vocabulary-parallel: this rank's rows of lm_head, then every rank's [rows, V/TP] block side by side.
  const int64_t Vl = shard_.vocab_end - shard_.vocab_begin, V = c.vocab_size;
  g.n = int(Vl);
  g.y = logits_mine_;
  gemm_->run(g, stream_);
  tp_->all_gather(logits_mine_, size_t(rows * Vl) * 4, logits_parts_, stream_);
  for (int r = 0; r < tp_->size(); ++r)
    ORCHID_CUDA_CHECK(cudaMemcpy2DAsync(logits_ + r * Vl, size_t(V) * 4, logits_parts_ + r * rows * Vl,
                                        size_t(Vl) * 4, size_t(Vl) * 4, size_t(rows),
                                        cudaMemcpyDeviceToDevice, stream_));
}

kernels::attention::PlanOptions CudaRank::make_plan_options() const {
  attn::PlanOptions po;
  po.num_q_heads = int(local_.num_heads);
  po.num_kv_heads = int(local_.num_kv_heads);
  po.sm_count = kernels::device_info().sm_count;
  po.prefill_rows = use_hopper_prefill() ? attn::kPrefillBlockMHopper : attn::kPrefillBlockM;
  // The Hopper kernel's full-attention launches split the keys of a short last round's tiles.
  po.balance_prefill = use_hopper_prefill() && attn::prefill_balance_enabled();
  // A verify step's 1 + k queries a sequence go to the decode kernel (split KV, one read of K/V for all).
  po.max_decode_queries = 1 + opts_.max_draft_tokens;
  for (int64_t l = 0; l < local_.num_layers; ++l)  // the sliding layers' decodes take fewer KV splits
    if (local_.is_sliding(l)) po.window = int(local_.sliding_window);
  return po;
}

CudaRank::StepMeta CudaRank::upload_step(const std::vector<int32_t>& tokens, const StepBatch& b,
                                         const std::vector<int32_t>& rows, const attn::PlanOptions& po) {
  // The pinned buffer is the source of the last step's copies: with that step maybe still queued behind
  // another (pipelining), wait until they have run.
  ORCHID_CUDA_CHECK(cudaEventSynchronize(staged_));
  std::vector<attn::PlanSequence> ps(b.seqs.size());
  for (size_t i = 0; i < b.seqs.size(); ++i) {
    ps[i].q_start = b.seqs[i].token_begin;
    ps[i].num_q = b.seqs[i].num_tokens;
    ps[i].start_pos = b.seqs[i].start_pos;
    ps[i].full_table_begin = b.seqs[i].full_table_begin;
    ps[i].sliding_table_begin = b.seqs[i].sliding_table_begin;
  }
  plan_.build(ps, b.num_tokens(), po);
  ORCHID_CHECK(plan_.workspace_bytes() <= attn_ws_bytes_,
               "attention plan: needs {} bytes of workspace, {} planned", plan_.workspace_bytes(),
               attn_ws_bytes_);
  auto put = [&](size_t at, size_t cap, const void* src, size_t bytes, const char* what) {
    if (bytes > cap) fail("step metadata: {} needs {} bytes, the buffer holds {}", what, bytes, cap);
    if (bytes == 0) return;
    std::memcpy(h_meta_ + at, src, bytes);
    ORCHID_CUDA_CHECK(cudaMemcpyAsync(d_meta_ + at, h_meta_ + at, bytes, cudaMemcpyHostToDevice, stream_));
  };
  // A page table changes little from one step to the next (a page appended here and there, a sequence in
  // or out): the host buffer mirrors what the device holds, and only the 1 KiB blocks that differ are sent.
  auto put_changed = [&](int which, size_t at, const std::vector<int32_t>& table, const char* what) {
    const size_t bytes = table.size() * 4;
    if (bytes > cap_table_)
      fail("step metadata: {} needs {} bytes, the buffer holds {}", what, bytes, cap_table_);
    constexpr size_t kBlock = 1024;
    const auto* src = reinterpret_cast<const uint8_t*>(table.data());
    size_t run_begin = 0, run_end = 0;  // the pending run of changed blocks
    auto flush = [&] {
      if (run_end > run_begin)
        ORCHID_CUDA_CHECK(cudaMemcpyAsync(d_meta_ + at + run_begin, h_meta_ + at + run_begin,
                                          run_end - run_begin, cudaMemcpyHostToDevice, stream_));
      run_begin = run_end = 0;
    };
    for (size_t o = 0; o < bytes; o += kBlock) {
      const size_t n = std::min(kBlock, bytes - o);
      // Blocks past what the device holds were never sent; the rest only when they differ.
      const bool changed = o + n > table_bytes_[which] || std::memcmp(h_meta_ + at + o, src + o, n) != 0;
      if (!changed) {
        flush();
        continue;
      }
      std::memcpy(h_meta_ + at + o, src + o, n);
      if (run_end == run_begin) run_begin = o;
      run_end = o + n;
    }
    flush();
    table_bytes_[which] = std::max(table_bytes_[which], bytes);
  };
  put(off_tokens_, cap_tokens_, tokens.data(), tokens.size() * 4, "tokens");
  put(off_blob_, cap_blob_, plan_.blob().data(), plan_.blob_bytes(), "attention plan");
  put(off_rows_, cap_rows_, rows.data(), rows.size() * 4, "logits rows");
  put_changed(0, off_full_, b.full_page_table, "full page table");
  put_changed(1, off_sliding_, b.sliding_page_table, "sliding page table");
  StepMeta m;
  m.tokens = reinterpret_cast<const int32_t*>(d_meta_ + off_tokens_);
  m.full = reinterpret_cast<const int32_t*>(d_meta_ + off_full_);
  m.sliding = reinterpret_cast<const int32_t*>(d_meta_ + off_sliding_);
  m.rows = reinterpret_cast<const int32_t*>(d_meta_ + off_rows_);
  m.plan = plan_.device_view(d_meta_ + off_blob_);
  if (!b.from_previous.empty() && samples_) {  // the tokens the step before drew, still on the device only
    ORCHID_CHECK(prev_ids_ != nullptr, "a step takes {} tokens from a step that drew none here",
                 b.from_previous.size());
    const size_t bytes = b.from_previous.size() * 8;
    if (bytes > cap_prev_)
      fail("step metadata: {} tokens from the step before, room for {}", bytes / 8, cap_prev_ / 8);
    static_assert(sizeof(TokenFromPrevious) == 8);
    for (const auto& f : b.from_previous)
      ORCHID_CHECK(f.sample >= 0 && f.sample < prev_rows_, "token from sample {} of {}", f.sample,
                   prev_rows_);
    std::memcpy(h_meta_ + off_prev_, b.from_previous.data(), bytes);
    ORCHID_CUDA_CHECK(
        cudaMemcpyAsync(d_meta_ + off_prev_, h_meta_ + off_prev_, bytes, cudaMemcpyHostToDevice, stream_));
    kernels::ops::scatter_tokens(
        prev_ids_, prev_stride_, reinterpret_cast<const int32_t*>(d_meta_ + off_prev_),
        int64_t(b.from_previous.size()), reinterpret_cast<int32_t*>(d_meta_ + off_tokens_), stream_);
  }
  // Only rank 0 drew them: every rank takes its step tokens from rank 0's (one all-gather of the tokens).
  if (!b.from_previous.empty() && tp_->size() > 1)
    take_rank0_rows(reinterpret_cast<int32_t*>(d_meta_ + off_tokens_), int64_t(tokens.size()));
  return m;
}

void CudaRank::run_layers(const StepMeta& m, int64_t T) {
  const int64_t H = config_.hidden_size, L = config_.num_layers;
  auto capture = [&](int64_t at) {
    if (!head_) return;
    const auto& ids = head_->config().aux_layers;
    for (size_t i = 0; i < ids.size(); ++i)
      if (ids[i] == at)
        kernels::eagle3::f32_to_bf16_cols(x_, T, H, head_->aux(), 3 * H, int64_t(i) * H, stream_);
  };
  // Each layer's MoE combine also does the next layer's input norm where both are plain layers (not the
  // precise one) and the experts all live on this rank: one launch and one pass over x fewer a layer
  // (ORCHID_COMBINE_NORM=0: separate kernels, for comparison).
  static const bool fuse_norms = [] {
    const char* v = std::getenv("ORCHID_COMBINE_NORM");
    return v == nullptr || std::string(v) != "0";
  }();
  bool normed = false;
  for (int64_t l = 0; l < L; ++l) {
    capture(l);
    const bool fuse = fuse_norms && l + 1 < L && l + 1 != precise_layer_;
    normed = layer(l, m, T, normed, fuse ? weights_.layers[size_t(l + 1)].input_norm : nullptr);
  }
  capture(L);
}

namespace {
// The post-attention norm done by the MoE block (moe_forward's in_norm: one launch with the router and the
// routing at 1-2 tokens, norm_route.h); ORCHID_NORM_ROUTE=0: the norm kernel here, then the block, as before
// (for comparison).
bool norm_in_moe() {
  static const bool on = [] {
    const char* v = std::getenv("ORCHID_NORM_ROUTE");
    return v == nullptr || std::string(v) != "0";
  }();
  return on;
}

// The decode steps' QKV projection with its RoPE and KV write fused (qkv_rope_gemm.h), on by default:
// whole steps -1.1/-1.3% at 20b/120b B=1 (RESULTS, 2026-12-07). ORCHID_QKV_ROPE=0 restores the GEMM +
// rope_kv_write.
bool fused_qkv_rope() {
  static const bool on = [] {
    const char* v = std::getenv("ORCHID_QKV_ROPE");
    return v == nullptr || std::string(v) != "0";
  }();
  return on;
}
}  // namespace

bool CudaRank::layer(int64_t l, const StepMeta& m, int64_t T, bool input_normed, const float* next_norm) {
  if (l == precise_layer_) {
    precise_layer(l, m, T);
    return false;
  }
  const auto& c = local_;
  const int64_t H = c.hidden_size;
  const float eps = float(c.rms_norm_eps);
  const DeviceLayer& L = weights_.layers[size_t(l)];
  const bool sliding = c.is_sliding(l);
  if (!input_normed) kernels::norm::rmsnorm_residual(x_, nullptr, L.input_norm, h_, T, H, eps, stream_);
  // A few tokens with a BF16 cache: the projection, bias, RoPE and KV write in one launch (qkv_rope_gemm.h);
  // otherwise the GEMM, then rope_kv_write.
  attn::QkvRopeGemmArgs f;
  f.hidden = int(H);
  f.x = h_;
  f.w = L.qkv_w;
  f.bias = L.qkv_b;
  f.rope = rope_;
  f.q_out = q_;
  f.k_pool = static_cast<__nv_bfloat16*>(k_pool_[size_t(l)]);
  f.v_pool = static_cast<__nv_bfloat16*>(v_pool_[size_t(l)]);
  f.page_table = sliding ? m.sliding : m.full;
  f.table_kind = sliding ? attn::kSlidingTable : attn::kFullTable;
  f.page_size = spec_.page_size;
  if (fused_qkv_rope() && !kv_fp8() && attn::qkv_rope_gemm_supports(f, m.plan)) {
    attn::qkv_rope_gemm(f, m.plan, stream_);
  } else {
    kernels::DenseGemmArgs g;
    g.m = int(T);
    g.n = int(c.q_dim() + 2 * c.kv_dim());
    g.k = int(H);
    g.x = h_;
    g.w = L.qkv_w;
    g.y = qkv_;
    gemm_->run(g, stream_);

    attn::RopeKvWriteArgs r;
    r.qkv = qkv_;
    r.bias = L.qkv_b;
    r.bias_fp32 = true;
    r.rope = rope_;
    r.q_out = q_;
    r.k_pool = k_pool_[size_t(l)];
    r.v_pool = v_pool_[size_t(l)];
    r.kv_fp8 = kv_fp8();  // scales 1.0 (the checkpoints carry none)
    r.page_table = f.page_table;
    r.table_kind = f.table_kind;
    r.page_size = spec_.page_size;
    attn::rope_kv_write(r, m.plan, stream_);
  }

  attn::SinkAttentionArgs a;
  a.q = q_;
  a.k_pool = k_pool_[size_t(l)];
  a.v_pool = v_pool_[size_t(l)];
  a.kv_fp8 = kv_fp8();
  a.page_table = f.page_table;
  a.table_kind = f.table_kind;
  a.page_size = spec_.page_size;
  a.num_pages = sliding ? spec_.num_sliding_pages : spec_.num_full_pages;
  a.prefill_variant = use_hopper_prefill() ? attn::PrefillVariant::kHopper : attn::PrefillVariant::kMmaSync;
  a.sinks = L.sinks;
  a.window = sliding ? int(c.sliding_window) : 0;
  a.softmax_scale = float(1.0 / std::sqrt(double(c.head_dim)));
  a.out = attn_;
  attn::sink_attention(a, m.plan, attn_ws_, stream_);

  kernels::DenseGemmArgs g;
  g.m = int(T);
  g.n = int(H);
  g.k = int(c.q_dim());
  g.x = attn_;
  g.w = L.o_w;
  if (tp_->size() == 1) {
    g.bias = L.o_b;
    g.y = o_;
    gemm_->run(g, stream_);
    if (norm_in_moe()) {  // the MoE block adds o_ and norms (with the router and routing at 1-2 tokens)
      kernels::MoeInputNorm in;
      in.residual = x_;
      in.delta = o_;
      in.gamma = L.post_norm;
      in.eps = eps;
      in.out = h_;
      return moe(l, T, opts_.precise_routing, next_norm, &in);
    }
    if (opts_.precise_routing) {  // the router reads the norm output at fp32 accuracy (hi rows, then lo rows)
      kernels::norm::rmsnorm_residual_split(x_, o_, L.post_norm, h_, h_ + T * H, T, H, eps, stream_);
    } else {
      kernels::norm::rmsnorm_residual(x_, o_, L.post_norm, h_, T, H, eps, stream_);
    }
  } else {  // row-parallel: fp32 partial sums over this rank's heads, the bias on one rank, all-reduced
    g.bias = shard_.adds_o_bias ? L.o_b_f32 : nullptr;
    g.y = o_f32_;
    g.out = kernels::GemmOut::kF32;
    gemm_->run(g, stream_);
    tp_->all_reduce_sum(o_f32_, size_t(T * H), stream_);
    if (opts_.precise_routing) {
      kernels::norm::rmsnorm_residual_split(x_, o_f32_, L.post_norm, h_, h_ + T * H, T, H, eps, stream_);
    } else {
      kernels::norm::rmsnorm_residual_f32(x_, o_f32_, L.post_norm, h_, T, H, eps, stream_);
    }
  }
  return moe(l, T, opts_.precise_routing, next_norm);
}

// The MoE block: into the residual stream directly, or (expert parallelism) this rank's part, summed over
// the EP group, then added.
bool CudaRank::moe(int64_t l, int64_t T, bool split_input, const float* next_norm,
                   const kernels::MoeInputNorm* in_norm) {
  const DeviceLayer& L = weights_.layers[size_t(l)];
  if (ep_->size() == 1) {
    kernels::MoeNextNorm nn;
    nn.gamma = next_norm;
    nn.out = h_;
    nn.eps = float(local_.rms_norm_eps);
    kernels::moe_forward(moe_cfg_, L.moe, h_, x_, int(T), *gemm_, moe_ws_, stream_, split_input,
                         kernels::MoeOutput::kAddToResidual, next_norm != nullptr ? &nn : nullptr, in_norm);
    return next_norm != nullptr;
  }
  kernels::moe_forward(moe_cfg_, L.moe, h_, moe_part_, int(T), *gemm_, moe_ws_, stream_, split_input,
                       kernels::MoeOutput::kStorePart, nullptr, in_norm);
  ep_->all_reduce_sum(moe_part_, size_t(T * config_.hidden_size), stream_);
  kernels::ops::add_f32(x_, moe_part_, T * config_.hidden_size, stream_);
  return false;
}

// The same layer with its attention block above BF16: every activation BF16 would round is fp32, or two
// BF16 halves (hi + lo) where a BF16 GEMM takes it (the second call accumulating into the fp32 output).
// Weights stay as they are. The experts take the BF16 (hi) norm output like every layer; the router takes
// both halves. Buffers: h_ holds the norm outputs' hi rows then lo rows; qkv_f32_ the fp32 QKV rows (Q
// rotated in place), then the O-projection output; attn_ / q_ the attention output's hi / lo halves.
void CudaRank::precise_layer(int64_t l, const StepMeta& m, int64_t T) {
  const auto& c = local_;
  const int64_t H = c.hidden_size;
  const int qkv_dim = int(c.q_dim() + 2 * c.kv_dim());
  const float eps = float(c.rms_norm_eps);
  const DeviceLayer& L = weights_.layers[size_t(l)];
  __nv_bfloat16* h_lo = h_ + T * H;
  // qkv_f32_ = (hi + lo) W^T + bias: two BF16 GEMMs, the second accumulating.
  auto split_gemm = [&](const void* hi, const void* lo, const void* w, const float* bias, int n, int k) {
    kernels::DenseGemmArgs g;
    g.m = int(T);
    g.n = n;
    g.k = k;
    g.w = w;
    g.y = qkv_f32_;
    g.out = kernels::GemmOut::kF32;
    g.x = hi;
    g.bias = bias;
    gemm_->run(g, stream_);
    g.x = lo;
    g.bias = nullptr;
    g.accumulate = true;
    gemm_->run(g, stream_);
  };
  kernels::norm::rmsnorm_residual_split(x_, static_cast<const float*>(nullptr), L.input_norm, h_, h_lo, T, H,
                                        eps, stream_);
  split_gemm(h_, h_lo, L.qkv_w, nullptr, qkv_dim, int(H));  // bias: added with RoPE

  attn::RopeKvWriteArgs r;
  r.fp32 = true;
  r.qkv = qkv_f32_;
  r.bias = L.qkv_b;
  r.bias_fp32 = true;
  r.rope = rope_;
  r.q_out = qkv_f32_;
  r.q_stride = qkv_dim;
  r.k_pool = k_pool_[size_t(l)];
  r.v_pool = v_pool_[size_t(l)];
  r.page_table = m.sliding;
  r.table_kind = attn::kSlidingTable;
  r.page_size = spec_.page_size;
  attn::rope_kv_write(r, m.plan, stream_);

  attn::PreciseAttentionArgs a;
  a.q = qkv_f32_;
  a.q_stride = qkv_dim;
  a.k_pool = static_cast<const float*>(k_pool_[size_t(l)]);
  a.v_pool = static_cast<const float*>(v_pool_[size_t(l)]);
  a.page_table = m.sliding;
  a.table_kind = attn::kSlidingTable;
  a.page_size = spec_.page_size;
  a.sinks = L.sinks;
  a.window = int(c.sliding_window);
  a.softmax_scale = float(1.0 / std::sqrt(double(c.head_dim)));
  a.out_hi = attn_;
  a.out_lo = q_;
  attn::precise_sink_attention(a, m.plan, stream_);

  // The O projection into qkv_f32_ (the QKV rows are consumed), then the residual.
  // Tensor parallelism: partial sums over this rank's heads, the bias on one rank, all-reduced.
  split_gemm(attn_, q_, L.o_w, shard_.adds_o_bias ? L.o_b_f32 : nullptr, int(H), int(c.q_dim()));
  tp_->all_reduce_sum(qkv_f32_, size_t(T * H), stream_);
  kernels::norm::rmsnorm_residual_split(x_, qkv_f32_, L.post_norm, h_, h_lo, T, H, eps, stream_);
  moe(l, T, true);
}

std::vector<float> CudaRank::run_layer(int64_t l, const std::vector<float>& x, int64_t n,
                                       std::vector<int32_t>* topk) {
  ORCHID_CUDA_CHECK(cudaSetDevice(device_));
  const auto& c = config_;
  const StepBatch b = single_sequence_batch(spec_, int32_t(n));
  const StepMeta m = upload_step(b.tokens, b, {}, plan_options_);
  ORCHID_CUDA_CHECK(cudaMemcpyAsync(x_, x.data(), x.size() * 4, cudaMemcpyHostToDevice, stream_));
  layer(l, m, n);
  std::vector<float> y(x.size());
  ORCHID_CUDA_CHECK(cudaMemcpyAsync(y.data(), x_, y.size() * 4, cudaMemcpyDeviceToHost, stream_));
  if (topk) {
    topk->resize(size_t(n * c.experts_per_token));
    const kernels::MoeBuffers mb = kernels::moe_buffers(moe_cfg_, moe_ws_);
    ORCHID_CUDA_CHECK(
        cudaMemcpyAsync(topk->data(), mb.topk_idx, topk->size() * 4, cudaMemcpyDeviceToHost, stream_));
  }
  ORCHID_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return y;
}

void CudaRank::decode_body(const StepMeta& m, int64_t T, DecodePick pick) {
  kernels::ops::embedding_gather(weights_.embedding, m.tokens, x_, T, config_.hidden_size, stream_);
  run_layers(m, T);
  compute_logits(m.rows, T);
  if (!samples_) return;
  if (pick == DecodePick::kSampler)
    sampler_->enqueue(logits_, stream_);
  else if (pick == DecodePick::kArgmax)
    kernels::ops::greedy_pick(logits_, T, config_.vocab_size, d_ids_, d_logprobs_, stream_);
}

namespace {
// A drafted step drew every position of its sampled sequences (1 + num_draft rows each, in order): keep each
// sequence's run up to its first draw that differs from the draft.
void keep_accepted(const StepBatch& b, StepOutput& out) {
  std::vector<SampledToken> draws = std::move(out.samples);
  out.samples.clear();
  size_t at = 0;
  for (const auto& s : b.seqs) {
    if (!s.sample || s.num_tokens == 0) continue;
    ORCHID_CHECK(at + size_t(s.num_draft) + 1 <= draws.size(), "fewer draws than drafted positions");
    const std::span<const SampledToken> mine(draws.data() + at, size_t(s.num_draft) + 1);
    out.num_accepted.push_back(accept_drafts(b, s, mine, out.samples));
    at += mine.size();
  }
}

// Greedy without logprobs beyond the chosen token's, penalties or banned tokens: the arg-max kernel serves
// it.
bool plain_greedy(const StepBatch& b) {
  for (const auto& s : b.seqs) {
    if (!s.sample) continue;
    const SamplingParams& p = b.params[size_t(s.params_index)];
    if (!p.is_greedy() || p.num_logprobs > 0 || p.uses_penalties() || s.num_banned > 0 || s.mask_row >= 0)
      return false;
  }
  return true;
}
}  // namespace

// Decode steps (one new token per sequence, all sampled) and verify steps (every sequence with the same
// 1 + k tokens, k of them drafts, all positions sampled) without penalties or banned tokens replay a graph;
// their histories and banned lists live in buffers that may grow, which a graph cannot follow.
bool CudaRank::graphable(const StepBatch& b) const {
  if (!graphs_ok_ || b.logits != LogitsMode::kNone || b.seqs.empty()) return false;
  const int64_t B = int64_t(b.seqs.size());
  if (B > kMaxDecodeGraphBatch || B > opts_.max_step_seqs) return false;
  const int32_t q = b.seqs[0].num_tokens;
  if (q < 1 || q > 1 + opts_.max_draft_tokens || B * q > opts_.max_step_tokens) return false;
  if (q * (local_.num_heads / local_.num_kv_heads) > attn::kMaxDecodeRows) return false;  // not a decode
  for (const auto& s : b.seqs)
    if (s.num_tokens != q || s.num_draft != q - 1 || !s.sample ||
        b.params[size_t(s.params_index)].uses_penalties() || s.num_banned > 0)
      return false;
  return true;
}

std::vector<int32_t> CudaRank::decode_graph_batches() const {
  if (!graphs_ok_) return {};
  return runtime::decode_graph_batches(opts_.max_step_seqs, opts_.max_step_tokens);
}

// A decode or verify step replays the graph captured for its batch bucket, its tokens a sequence (q) and
// its sampler (arg-max or the GPU sampler): the metadata and sampling parameters are uploaded to the same
// addresses, padding tokens and decode slots are inert (the plan marks them -1, the sampler's padding rows
// are greedy), and every grid depends only on the bucket and q. The first step of a key runs eagerly
// (algorithm selection, lazy initialisation), then is captured. A verify step's draws are accepted on the
// host as in forward().
namespace {
// Waits for the stream (or an event), adding the time blocked to out.device_wait_seconds (StepOutput).
void wait_for_device(cudaStream_t stream, StepOutput& out) {
  const auto t0 = std::chrono::steady_clock::now();
  ORCHID_CUDA_CHECK(cudaStreamSynchronize(stream));
  out.device_wait_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
void wait_for_event(cudaEvent_t event, StepOutput& out) {
  const auto t0 = std::chrono::steady_clock::now();
  ORCHID_CUDA_CHECK(cudaEventSynchronize(event));
  out.device_wait_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

StepOutput CudaRank::forward_graph(const StepBatch& b, bool launch) {
  const int64_t B = int64_t(b.seqs.size());
  const int32_t q = b.seqs[0].num_tokens;
  const int bucket = decode_graph_bucket(B, q, opts_.max_step_seqs, opts_.max_step_tokens);
  const int64_t T = int64_t(bucket) * q;  // token rows, every one sampled
  // The pick and the wait for masks are decided alike on every rank; rank 0 alone samples.
  const bool wants_sampler = !plain_greedy(b), sampler = samples_ && wants_sampler;
  const bool masked = wants_sampler && GpuSampler::has_masks(b);
  const DecodePick pick =
      masked ? DecodePick::kAfterGraph : (wants_sampler ? DecodePick::kSampler : DecodePick::kArgmax);
  std::vector<int32_t> tokens = b.tokens, rows(size_t(T), 0);
  tokens.resize(size_t(T), 0);
  for (int64_t i = 0; i < B; ++i)
    for (int32_t j = 0; j < q; ++j) rows[size_t(i * q + j)] = b.seqs[size_t(i)].token_begin + j;
  attn::PlanOptions po = plan_options_;
  po.token_bucket = int(T);
  po.seq_bucket = po.decode_bucket = bucket;
  po.decode_splits = attn::decode_splits_for(bucket, po);
  po.decode_splits_window = attn::window_splits_for(po.decode_splits, q, po);
  const StepMeta m = upload_step(tokens, b, rows, po);
  ORCHID_CHECK(m.plan.decode_bucket == bucket && m.plan.decode_q == q && m.plan.num_prefill_tiles == 0,
               "a graphed step must be all decode slots of {} tokens", q);
  if (sampler) sampler_->upload(b, stream_, T);
  ORCHID_CUDA_CHECK(cudaEventRecord(staged_, stream_));
  const int key = (bucket * 64 + q) * 4 + int(pick);
  auto it = graphs_.find(key);
  if (it == graphs_.end()) {
    {
      // Its shapes recur every step of this key: the dense GEMMs time their choices here, once.
      const kernels::DenseGemm::TimingScope timing;
      decode_body(m, T, pick);
    }
    ORCHID_CUDA_CHECK(cudaStreamSynchronize(stream_));
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    ORCHID_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    decode_body(m, T, pick);
    ORCHID_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
    ORCHID_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    ORCHID_CUDA_CHECK(cudaGraphDestroy(graph));
    it = graphs_.emplace(key, exec).first;
  }
  ORCHID_CUDA_CHECK(cudaGraphLaunch(it->second, stream_));
  StepOutput out;
  set_previous(nullptr, 1, 0);
  if (!samples_) {
    if (launch) {
      launched_.push_back(masked && b.masks_later ? awaiting_masks(B * q) : enqueued_elsewhere());
      return out;
    }
    wait_for_device(stream_, out);
    return out;
  }
  if (masked && launch && b.masks_later) {  // sampled when the masks come (supply_masks)
    launched_.push_back(awaiting_masks(B * q));
    return out;
  }
  if (masked) {  // the graph is running: the masks are waited for (and copied) while it does
    sampler_->upload_masks(b, stream_);
    sampler_->enqueue(logits_, stream_);
  }
  if (q == 1) {
    if (sampler)
      set_previous(sampler_->device_tokens(), GpuSampler::kTokenStride, sampler_->sampled_rows());
    else
      set_previous(d_ids_, 1, B);
  }
  Launched l = download_samples(sampler, B * q);
  if (launch) {
    launched_.push_back(std::move(l));
    return out;
  }
  wait_for_device(stream_, out);
  out.samples = read_samples(l);
  if (q > 1) keep_accepted(b, out);
  if (head_) head_->run(b, m.full, *gemm_, out);
  return out;
}

CudaRank::Launched CudaRank::download_samples(bool sampler, int64_t rows) {
  Launched l;
  l.slot = slot_;
  slot_ ^= 1;
  l.sampler = sampler;
  l.rows = rows;
  if (sampler) {
    sampler_->download(stream_, l.slot);
  } else {
    int32_t* ids = h_ids_ + l.slot * sampled_rows_cap_;
    float* logprobs = h_logprobs_ + l.slot * sampled_rows_cap_;
    ORCHID_CUDA_CHECK(cudaMemcpyAsync(ids, d_ids_, size_t(rows) * 4, cudaMemcpyDeviceToHost, stream_));
    ORCHID_CUDA_CHECK(
        cudaMemcpyAsync(logprobs, d_logprobs_, size_t(rows) * 4, cudaMemcpyDeviceToHost, stream_));
  }
  ORCHID_CUDA_CHECK(cudaEventRecord(done_[l.slot], stream_));
  return l;
}

std::vector<SampledToken> CudaRank::read_samples(const Launched& l) const {
  if (l.sampler) return sampler_->results(l.slot, l.rows);
  std::vector<SampledToken> samples(size_t(l.rows));
  for (int64_t k = 0; k < l.rows; ++k) {
    samples[size_t(k)].token = h_ids_[l.slot * sampled_rows_cap_ + k];
    samples[size_t(k)].logprob = h_logprobs_[l.slot * sampled_rows_cap_ + k];
  }
  return samples;
}

void CudaRank::set_previous(const int32_t* ids, int64_t stride, int64_t rows) {
  prev_ids_ = ids;
  prev_stride_ = stride;
  prev_rows_ = ids ? rows : 0;
}

size_t CudaRank::gather_block() const {
  return std::max(cap_tokens_ / 4, size_t(sampled_rows_cap_));
}

void CudaRank::take_rank0_rows(int32_t* data, int64_t n) {
  ORCHID_CHECK(size_t(n) <= gather_block(), "{} words to share, room for {}", n, gather_block());
  tp_->all_gather(data, size_t(n) * 4, d_gathered_, stream_);
  if (!samples_)
    ORCHID_CUDA_CHECK(cudaMemcpyAsync(data, d_gathered_, size_t(n) * 4, cudaMemcpyDeviceToDevice, stream_));
}

std::vector<int32_t> CudaRank::rank0_previous(const StepBatch& b, std::vector<int32_t> mine) {
  if (tp_->size() == 1) return mine;
  // How many draws the step reads: the same on every rank (it follows from the batch).
  int64_t n = 0;
  for (const auto* from : {&b.from_previous, &b.history_from_previous})
    for (const auto& f : *from) n = std::max<int64_t>(n, int64_t(f.sample) + 1);
  if (n == 0) return {};
  int32_t* send = d_gathered_ + size_t(tp_->size()) * gather_block();
  if (samples_) {
    ORCHID_CHECK(int64_t(mine.size()) >= n, "a step reads draw {} of a step that drew {}", n - 1,
                 mine.size());
    ORCHID_CUDA_CHECK(cudaMemcpyAsync(send, mine.data(), size_t(n) * 4, cudaMemcpyHostToDevice, stream_));
  }
  take_rank0_rows(send, n);
  std::vector<int32_t> out(static_cast<size_t>(n));
  ORCHID_CUDA_CHECK(cudaMemcpyAsync(out.data(), send, size_t(n) * 4, cudaMemcpyDeviceToHost, stream_));
  ORCHID_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return out;
}

bool CudaRank::launchable(const StepBatch& b) const {
  // The same answer on every rank (their branches must run the same collectives).
  if (!opts_.eagle3_head.empty() || b.logits != LogitsMode::kNone || b.seqs.empty()) return false;
  bool samples = false;  // the step must draw something to be read later (prompt chunks may ride along)
  for (const auto& s : b.seqs) {
    if (s.num_draft > 0 || s.num_propose > 0 || (s.mask_row >= 0 && !b.masks_later)) return false;
    if (!s.sample) continue;
    if (b.params[size_t(s.params_index)].uses_penalties()) return false;
    samples = true;
  }
  return samples;
}

CudaRank::Launched CudaRank::enqueued_elsewhere() {
  Launched l;
  l.ready = true;  // nothing to read here: rank 0 reads the step's draws
  return l;
}

CudaRank::Launched CudaRank::awaiting_masks(int64_t rows) {
  set_previous(nullptr, 1, 0);
  Launched l;
  l.awaiting_masks = true;
  l.sampler = true;
  l.rows = rows;
  return l;
}

void CudaRank::supply_masks(const StepBatch& b) {
  ORCHID_CUDA_CHECK(cudaSetDevice(device_));
  ORCHID_CHECK(!launched_.empty() && launched_.back().awaiting_masks, "masks for a step that does not wait");
  if (masks_to_come_) {  // launched as a whole now, its masks known
    std::unique_ptr<StepBatch> step = std::move(masks_to_come_);
    ORCHID_CHECK(step->seqs.size() == b.seqs.size(), "masks of another batch");
    step->token_masks = b.token_masks;
    step->mask_words = b.mask_words;
    step->token_masks_ready = nullptr;
    step->masks_later = false;
    for (size_t i = 0; i < b.seqs.size(); ++i) step->seqs[i].mask_row = b.seqs[i].mask_row;
    launched_.pop_back();
    launch_now(*step);
    return;
  }
  const int64_t rows = launched_.back().rows;
  if (!samples_) {  // rank 0 samples; this rank takes the draws when a step reads them (upload_step)
    launched_.back() = enqueued_elsewhere();
    return;
  }
  sampler_->upload_masks(b, stream_);
  sampler_->enqueue(logits_, stream_);
  set_previous(sampler_->device_tokens(), GpuSampler::kTokenStride, rows);
  launched_.back() = download_samples(true, rows);
}

void CudaRank::settle(Launched& l) {
  ORCHID_CHECK(!l.awaiting_masks, "a launched step's masks never came");
  if (l.ready) return;
  StepOutput out;
  wait_for_event(done_[l.slot], out);
  out.samples = read_samples(l);
  l.done = std::move(out);
  l.ready = true;
}

void CudaRank::launch(const StepBatch& b) {
  ORCHID_CUDA_CHECK(cudaSetDevice(device_));
  ORCHID_CHECK(launched_.size() < 2, "a third step launched before the first was collected");
  if (b.masks_later && (!b.history_from_previous.empty() || !launchable(b))) {
    // A step forward() runs, which needs its masks at once: it runs when they come (supply_masks).
    masks_to_come_ = std::make_unique<StepBatch>(b);
    Launched l;
    l.awaiting_masks = true;
    launched_.push_back(std::move(l));
    return;
  }
  launch_now(b);
}

void CudaRank::launch_now(const StepBatch& b) {
  if (!b.history_from_previous.empty()) {
    // A penalty's history ends with the step before's draw, which the sampler's host parameters need: read
    // that step first (not overlapped), then run this one with everything known.
    // The step before is the last launched one, or, when it has been read already (a step whose masks came
    // after it was read), the last one read.
    for (Launched& l : launched_) settle(l);
    std::vector<int32_t> previous = last_read_tokens_;
    if (!launched_.empty()) {
      previous.clear();
      for (const SampledToken& st : launched_.back().done.samples) previous.push_back(st.token);
    }
    previous = rank0_previous(b, std::move(previous));  // only rank 0 read them
    b.wait_token_masks();                               // the copy takes the masks: they must be written
    StepBatch filled = b;
    filled.token_masks_ready = nullptr;
    fill_from_previous(filled, previous);
    Launched l;
    l.done = forward(filled);
    l.ready = true;
    launched_.push_back(std::move(l));
    return;
  }
  if (!launchable(b) || b.num_tokens() == 0) {
    Launched l;
    l.done = forward(b);
    l.ready = true;
    launched_.push_back(std::move(l));
    return;
  }
  if (graphable(b)) {
    forward_graph(b, true);
    return;
  }
  forward_eager(b, true);
}

StepOutput CudaRank::collect() {
  ORCHID_CUDA_CHECK(cudaSetDevice(device_));
  ORCHID_CHECK(!launched_.empty(), "collect() without a launched step");
  settle(launched_.front());
  StepOutput out = std::move(launched_.front().done);
  launched_.pop_front();
  last_read_tokens_.clear();
  for (const SampledToken& st : out.samples) last_read_tokens_.push_back(st.token);
  return out;
}

StepOutput CudaRank::forward(const StepBatch& b) {
  ORCHID_CUDA_CHECK(cudaSetDevice(device_));
  for (Launched& l : launched_) settle(l);  // this step reuses their result slots
  if (b.num_tokens() == 0) return StepOutput{};
  if (graphable(b)) return forward_graph(b, false);
  return forward_eager(b, false);
}

StepOutput CudaRank::forward_eager(const StepBatch& b, bool launch) {
  const auto& c = config_;
  const int64_t T = b.num_tokens(), H = c.hidden_size, V = c.vocab_size;
  StepOutput out;
  // Token rows whose logits are needed: sampled positions first (a drafted sequence's last num_draft + 1).
  std::vector<int32_t> rows;
  bool drafted = false;
  for (const auto& s : b.seqs) {
    if (!s.sample || s.num_tokens == 0) continue;
    for (int32_t i = s.num_draft; i >= 0; --i) rows.push_back(s.token_begin + s.num_tokens - 1 - i);
    drafted = drafted || s.num_draft > 0;
  }
  const size_t n_sampled = rows.size();
  ORCHID_CHECK(int64_t(n_sampled) <= sampled_rows_cap_, "{} sampled rows for {} planned", n_sampled,
               sampled_rows_cap_);
  if (b.logits == LogitsMode::kAll)
    for (int32_t t = 0; t < T; ++t) rows.push_back(t);
  const StepMeta m = upload_step(b.tokens, b, rows, plan_options_);
  const int32_t* d_rows = m.rows;
  // Sampled rows: a plain greedy step takes the arg-max kernel; anything else (temperature, top-k/p, min-p,
  // penalties, banned tokens, logprobs) the GPU sampler, whose parameters go up with the step's metadata.
  const bool sampling = n_sampled > 0 && samples_;
  const bool greedy = sampling && plain_greedy(b);
  if (sampling && !greedy) sampler_->upload(b, stream_);
  ORCHID_CUDA_CHECK(cudaEventRecord(staged_, stream_));
  kernels::ops::embedding_gather(weights_.embedding, m.tokens, x_, T, H, stream_);
  run_layers(m, T);
  set_previous(nullptr, 1, 0);

  // Raw logits, when asked for, are copied out first because the sampler applies penalties in place.
  if (n_sampled > 0 && !samples_) {
    compute_logits(d_rows, int64_t(n_sampled));  // its part of the gather
    if (launch) {
      launched_.push_back(b.masks_later ? awaiting_masks(int64_t(n_sampled)) : enqueued_elsewhere());
      return out;
    }
  }
  if (sampling) {
    compute_logits(d_rows, int64_t(n_sampled));
    std::vector<float> host_logits;
    if (b.logits == LogitsMode::kSampled) {
      host_logits.resize(n_sampled * size_t(V));
      ORCHID_CUDA_CHECK(cudaMemcpyAsync(host_logits.data(), logits_, host_logits.size() * 4,
                                        cudaMemcpyDeviceToHost, stream_));
    }
    if (launch && b.masks_later) {  // sampled when the masks come (supply_masks)
      launched_.push_back(awaiting_masks(int64_t(n_sampled)));
      return out;
    }
    if (greedy) {
      kernels::ops::greedy_pick(logits_, int64_t(n_sampled), V, d_ids_, d_logprobs_, stream_);
    } else {
      sampler_->upload_masks(b, stream_);  // the layers are enqueued: waiting here overlaps them
      sampler_->enqueue(logits_, stream_);
    }
    if (!drafted) {
      if (greedy)
        set_previous(d_ids_, 1, int64_t(n_sampled));
      else
        set_previous(sampler_->device_tokens(), GpuSampler::kTokenStride, int64_t(n_sampled));
    }
    Launched l = download_samples(!greedy, int64_t(n_sampled));
    if (launch) {
      launched_.push_back(std::move(l));
      return out;
    }
    wait_for_device(stream_, out);
    out.samples = read_samples(l);
    if (drafted) keep_accepted(b, out);
    if (b.logits == LogitsMode::kSampled) {
      out.logits = std::move(host_logits);
      out.logits_rows = int64_t(n_sampled);
    }
  }
  ORCHID_CHECK(!launch, "a launched step samples every sequence");
  if (b.logits == LogitsMode::kAll) {  // every position, in passes of at most logits_rows_cap_ rows
    if (samples_) out.logits.resize(size_t(T * V));
    for (int64_t r0 = 0; r0 < T; r0 += logits_rows_cap_) {
      const int64_t n = std::min(logits_rows_cap_, T - r0);
      compute_logits(d_rows + n_sampled + r0, n);
      if (samples_)
        ORCHID_CUDA_CHECK(cudaMemcpyAsync(out.logits.data() + r0 * V, logits_, size_t(n * V) * 4,
                                          cudaMemcpyDeviceToHost, stream_));
    }
    wait_for_device(stream_, out);
    if (samples_) out.logits_rows = T;
  }
  if (head_) head_->run(b, m.full, *gemm_, out);
  wait_for_device(stream_, out);
  return out;
}

}  // namespace orchid::runtime::cuda
