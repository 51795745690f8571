#include "runtime/cuda/cuda_backend.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <exception>
#include <functional>
#include <thread>

#include "core/error.h"
#include "kernels/attention/kv_layout.h"
#include "kernels/common/cuda_check.h"
#include "kernels/common/device_info.h"
#include "runtime/cuda/cuda_rank.h"
#include "runtime/cuda/device_communicator.h"
#include "runtime/cuda/device_memory.h"
#include "runtime/cuda/nccl_communicator.h"
#include "runtime/kv_memory_plan.h"
#include "runtime/kv_reshard.h"
#include "runtime/rank_threads.h"

namespace orchid::runtime::cuda {

bool cuda_device_available() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

CudaBackend::CudaBackend(const std::string& model_arg, const CudaBackendOptions& opts) : opts_(opts) {
  if (!cuda_device_available()) fail("--backend cuda: no CUDA device is available");
  if (kernels::attention::log2_exact(opts.page_size) < 0 || opts.page_size > 256)
    fail("--block-size must be a power of two up to 256 on the CUDA backend, got {}", opts.page_size);
  if (opts.max_step_tokens < 1 || opts.max_step_seqs < 1)
    fail("--max-num-batched-tokens and --max-num-seqs must be positive");
  const model::ModelRef ref = model::parse_model_ref(model_arg);
  config_ = model::load_config(ref);
  const model::ParallelConfig& pc = opts.parallel;
  if (pc.dp != 1)
    fail("--dp {}: one engine runs one attention replica (orchid serve --dp N runs N engines)", pc.dp);
  int devices = 0;
  ORCHID_CUDA_CHECK(cudaGetDeviceCount(&devices));
  const int world = pc.world();
  if (opts.first_device < 0 || (!opts.share_device && opts.first_device >= devices))
    fail(
        "this engine's first rank would run on GPU {}, but {} {} present (every --tp rank of every --dp "
        "replica takes a GPU of its own)",
        opts.first_device, devices, devices == 1 ? "is" : "are");
  model::validate_parallel(config_, pc, opts.share_device ? -1 : devices - opts.first_device);
  plan_ = model::make_shard_plan(config_, pc, opts.weights);
  int first_device = 0;
  ORCHID_CUDA_CHECK(cudaGetDevice(&first_device));
  std::vector<int> device_of(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r)
    device_of[size_t(r)] = opts.share_device ? first_device : opts.first_device + r;
  for (int d : device_of) {
    ORCHID_CUDA_CHECK(cudaSetDevice(d));
    const auto& dev = kernels::device_info();
    if (dev.cc_major != 9)
      fail("--backend cuda: orchid's kernels are built for Hopper (sm_90a); GPU {} is sm_{}{}", d,
           dev.cc_major, dev.cc_minor);
  }

  // Communicators: the TP group is every rank; EP groups are runs of `ep` consecutive ranks (the plan's
  // ep_rank = rank % ep). One rank needs none (unless NCCL is asked for, to test it).
  const int ep = pc.ep;
  std::vector<DeviceCommunicator*> tp(static_cast<size_t>(world)), epc(static_cast<size_t>(world));
  auto keep = [&](std::vector<std::unique_ptr<DeviceCommunicator>> group,
                  std::vector<DeviceCommunicator*>& at, int first) {
    for (size_t i = 0; i < group.size(); ++i) {
      at[size_t(first) + i] = group[i].get();
      comms_.push_back(std::move(group[i]));
    }
  };
  if (world == 1 && !opts.force_nccl) {
    comms_.push_back(std::make_unique<SoloDeviceCommunicator>());
    tp[0] = epc[0] = comms_.back().get();
  } else if (opts.share_device) {
    keep(make_shared_device_group(world), tp, 0);
    if (ep == world) {
      epc = tp;
    } else {
      for (int g = 0; g < world / ep; ++g) keep(make_shared_device_group(ep), epc, g * ep);
    }
  } else {
    keep(make_nccl_group(device_of), tp, 0);
    if (ep == world) {
      epc = tp;
    } else {
      std::vector<int> colors(static_cast<size_t>(world));
      for (int r = 0; r < world; ++r) colors[size_t(r)] = r / ep;
      keep(split_nccl(tp, colors), epc, 0);
    }
    spdlog::info("NCCL {}: {} rank{}", nccl_version(), world, world == 1 ? "" : "s");
  }
  if (world > 1) spdlog::info("cuda backend: {}", plan_.describe(config_));

  // Each rank's share of its device's memory, taken before any rank allocates.
  std::vector<size_t> budget(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) {
    ORCHID_CUDA_CHECK(cudaSetDevice(device_of[size_t(r)]));
    const auto mem = device_memory_info();
    const int sharing = int(std::count(device_of.begin(), device_of.end(), device_of[size_t(r)]));
    budget[size_t(r)] = rank_memory_budget(mem.total, mem.free, opts.gpu_memory_utilization, sharing);
  }
  ranks_.resize(size_t(world));
  auto build = [&](int r) {
    CudaRankSetup s;
    s.ref = ref;
    s.config = config_;
    s.shard = plan_.ranks[size_t(r)];
    s.opts = opts;
    s.device = device_of[size_t(r)];
    s.memory_budget = budget[size_t(r)];
    s.tp = tp[size_t(r)];
    s.ep = epc[size_t(r)];
    ranks_[size_t(r)] = std::make_unique<CudaRank>(s);
  };
  // Ranks load in parallel on their own GPUs; on a shared GPU one after the other (one staging buffer at a
  // time, and the loads share one device's bandwidth anyway).
  if (world == 1 || opts.share_device) {
    for (int r = 0; r < world; ++r) build(r);
  } else {
    std::vector<std::exception_ptr> errors(static_cast<size_t>(world));
    std::vector<std::thread> threads;
    for (int r = 0; r < world; ++r)
      threads.emplace_back([&, r] {
        try {
          build(r);
        } catch (...) {
          errors[size_t(r)] = std::current_exception();
        }
      });
    for (auto& t : threads) t.join();
    for (auto& e : errors)
      if (e) std::rethrow_exception(e);
  }
  // The pools every rank can hold.
  spec_ = ranks_[0]->kv_capacity();
  for (size_t r = 1; r < ranks_.size(); ++r) {
    const KvCacheSpec k = ranks_[r]->kv_capacity();
    spec_.num_full_pages = std::min(spec_.num_full_pages, k.num_full_pages);
    spec_.num_sliding_pages = std::min(spec_.num_sliding_pages, k.num_sliding_pages);
  }
  for (auto& rk : ranks_) rk->allocate_kv(spec_);
  if (opts.kv_share_bytes > 0) {
    leases_ = std::make_unique<KvShareLeases>(opts.kv_share_bytes,
                                              std::chrono::milliseconds(opts.kv_share_timeout_ms));
    spdlog::info("K/V export buffer: {:.2f} GiB a rank (CUDA IPC), leases of {} s",
                 double(opts.kv_share_bytes) / (1 << 30), double(opts.kv_share_timeout_ms) / 1000);
  }
  ORCHID_CUDA_CHECK(cudaSetDevice(first_device));
}

CudaBackend::~CudaBackend() {
  ranks_.clear();
  comms_.clear();
}

void CudaBackend::on_ranks(const std::function<void(CudaRank&)>& fn) {
  run_on_rank_threads(
      ranks_.size(), [&](size_t r) { fn(*ranks_[r]); },
      [&](size_t) {
        for (auto& c : comms_) c->abort();
      });
}

void CudaBackend::validate(const StepBatch& b) const {
  if (b.num_tokens() > opts_.max_step_tokens)
    fail("step of {} tokens exceeds --max-num-batched-tokens {}", b.num_tokens(), opts_.max_step_tokens);
  if (int64_t(b.seqs.size()) > opts_.max_step_seqs)
    fail("step of {} sequences exceeds --max-num-seqs {}", b.seqs.size(), opts_.max_step_seqs);
  validate_step(b, config_, spec_, std::min<int64_t>(config_.max_position_embeddings, opts_.max_model_len));
  for (const StepSequence& s : b.seqs) {
    if (s.num_draft > opts_.max_draft_tokens)
      fail("{} drafts in a sequence; the backend was sized for {}", s.num_draft, opts_.max_draft_tokens);
    if (s.num_propose > max_proposals())
      fail("{} proposals asked of a sequence; the backend's head makes up to {}", s.num_propose,
           max_proposals());
  }
}

int32_t CudaBackend::max_proposals() const {
  return ranks_[0]->max_proposals();
}

std::string CudaBackend::kv_layout() const {
  return ranks_[0]->kv_layout();
}

std::vector<size_t> CudaBackend::head_block_bytes(bool sliding) const {
  // A page of one layer on a rank is [its KV heads][page_size][64] (kv_layout.h): one head's block is the
  // page's bytes over the rank's heads (the precise layer's fp32 pages twice a BF16 one's).
  const int64_t local_heads = config_.num_kv_heads / int64_t(ranks_.size());
  std::vector<size_t> out;
  for (int64_t l = 0; l < config_.num_layers; ++l)
    if (config_.is_sliding(l) == sliding)
      out.push_back(ranks_[0]->kv_page_bytes(l, spec_.page_size) / size_t(local_heads));
  return out;
}

KvPages CudaBackend::read_kv(std::span<const int32_t> full_pages, std::span<const int32_t> sliding_pages,
                             int32_t first_sliding_page, int32_t num_tokens) {
  KvPages kv =
      kv_pages_for(kv_layout(), full_pages.size(), sliding_pages.size(), first_sliding_page, num_tokens);
  kv.ranks = int32_t(ranks_.size());
  for (auto& r : ranks_) r->read_pages(full_pages, sliding_pages, kv.full, kv.sliding);
  return kv;
}

void CudaBackend::write_kv(const KvPages& kv, std::span<const int32_t> full_pages,
                           std::span<const int32_t> sliding_pages) {
  check_kv_pages_fit(kv, kv_layout(), full_pages.size(), sliding_pages.size());
  if (kv.ranks != int32_t(ranks_.size()) && !kv.share) {  // another tensor-parallel split: regrouped by head
    KvPages mine = kv;
    mine.ranks = int32_t(ranks_.size());
    const int from = kv.ranks, to = int(ranks_.size()), heads = int(config_.num_kv_heads);
    mine.full = reshard_kv(kv.full, from, to, heads, int64_t(full_pages.size()), 1, head_block_bytes(false));
    mine.sliding =
        reshard_kv(kv.sliding, from, to, heads, int64_t(sliding_pages.size()), 1, head_block_bytes(true));
    return write_kv(mine, full_pages, sliding_pages);
  }
  if (kv.share) {  // each rank copies its heads from the sender ranks that hold them
    check_share_split(*kv.share);
    for (auto& r : ranks_) r->take_shared_pages(full_pages, sliding_pages, *kv.share);
    return;
  }
  size_t at_full = 0, at_sliding = 0;
  for (auto& r : ranks_) r->write_pages(full_pages, sliding_pages, kv.full, kv.sliding, at_full, at_sliding);
  if (at_full != kv.full.size() || at_sliding != kv.sliding.size())
    fail("K/V handed over has {} + {} bytes, {} + {} expected", kv.full.size(), kv.sliding.size(), at_full,
         at_sliding);
}

std::optional<KvPages> CudaBackend::share_kv(std::span<const int32_t> full_pages,
                                             std::span<const int32_t> sliding_pages,
                                             int32_t first_sliding_page, int32_t num_tokens,
                                             int32_t receiver_ranks) {
  // A receiver of another split takes its heads from the ranks that hold them (CudaRank::take_shared_pages).
  if (!leases_ || (receiver_ranks > 0 && config_.num_kv_heads % receiver_ranks != 0)) return std::nullopt;
  const auto [full_bytes, sliding_bytes] = ranks_[0]->handoff_bytes(full_pages, sliding_pages);
  const auto lease = leases_->acquire(full_bytes + sliding_bytes, steady_now_ms());
  if (!lease) return std::nullopt;  // the buffer is full: the pages go as bytes
  KvPages kv =
      kv_pages_for(kv_layout(), full_pages.size(), sliding_pages.size(), first_sliding_page, num_tokens);
  kv.ranks = int32_t(ranks_.size());
  auto share = std::make_shared<KvShare>();
  share->transport = "cuda_ipc";
  share->lease = lease->id;
  share->expires_ms = lease->expires_ms;
  try {
    for (auto& r : ranks_) {
      ORCHID_CHECK(r->handoff_bytes(full_pages, sliding_pages) == std::make_pair(full_bytes, sliding_bytes),
                   "ranks hold pages of different sizes");
      r->share_pages(full_pages, sliding_pages, lease->offset);
      share->ranks.push_back({r->share_region(), lease->offset, full_bytes, sliding_bytes});
    }
  } catch (...) {
    leases_->release(lease->id);
    throw;
  }
  kv.share = std::move(share);
  return kv;
}

void CudaBackend::check_share_split(const KvShare& share) const {
  if (share.transport != "cuda_ipc")
    fail("K/V shared over {}; this instance takes cuda_ipc", share.transport);
  const size_t from = share.ranks.size();
  if (from == 0 || config_.num_kv_heads % int64_t(from) != 0)
    fail("K/V shared in place by {} ranks: they cannot hold the model's {} KV heads", from,
         config_.num_kv_heads);
}

void CudaBackend::open_kv_share(const KvShare& share) {
  check_share_split(share);
  for (auto& r : ranks_)
    for (int s : r->share_senders(int(share.ranks.size()))) r->open_peer(share.ranks[size_t(s)].region);
}

std::vector<int32_t> CudaBackend::prefill_warm_up_lengths() const {
  // cuBLASLt's dense GEMMs (QKV, O, router) change kernels with the row count; an 8192-token prefill after a
  // 128-token warm-up loaded six new ones on its way, 11.8 ms of a 106 ms prefill (H100, bench/RESULTS.md).
  // Powers of 4 up to a whole step, and that step, capped at the default step of 16384 tokens (a larger
  // --max-num-batched-tokens would lengthen the start-up by seconds; its GEMMs are expected to keep the
  // 16384-row choices, not yet checked by a trace) and at the longest sequence a step may hold.
  const int64_t longest = std::min<int64_t>(config_.max_position_embeddings, opts_.max_model_len);
  const int32_t top = int32_t(std::min<int64_t>({int64_t(opts_.max_step_tokens), 16384, longest}));
  std::vector<int32_t> lengths;
  for (int32_t n = 1024; n < top; n *= 4) lengths.push_back(n);
  lengths.push_back(top);
  return lengths;
}

std::vector<int32_t> CudaBackend::decode_graph_batches() const {
  // Every rank runs the same step and captures the same buckets.
  return ranks_[0]->decode_graph_batches();
}

StepOutput CudaBackend::forward(const StepBatch& b) {
  validate(b);
  StepOutput out;
  on_ranks([&](CudaRank& r) {
    StepOutput mine = r.forward(b);
    if (&r == ranks_[0].get()) out = std::move(mine);
  });
  return out;
}

// Pipelined steps on every rank: each enqueues its share (its collectives in the same order); rank 0 draws,
// and a step's tokens from the step before reach the other ranks by an all-gather on the device.
void CudaBackend::launch(const StepBatch& b) {
  validate(b);
  on_ranks([&](CudaRank& r) { r.launch(b); });
}

void CudaBackend::supply_masks(const StepBatch& b) {
  on_ranks([&](CudaRank& r) { r.supply_masks(b); });
}

StepOutput CudaBackend::collect() {
  StepOutput out;
  on_ranks([&](CudaRank& r) {
    StepOutput mine = r.collect();
    if (&r == ranks_[0].get()) out = std::move(mine);
  });
  return out;
}

std::vector<float> CudaBackend::run_layer(int64_t layer, const std::vector<float>& x, int64_t n,
                                          std::vector<int32_t>* topk) {
  if (layer < 0 || layer >= config_.num_layers)
    fail("layer {} is outside [0, {})", layer, config_.num_layers);
  ORCHID_CHECK(int64_t(x.size()) == n * config_.hidden_size);
  validate(single_sequence_batch(spec_, int32_t(n)));
  std::vector<float> y;
  on_ranks([&](CudaRank& r) {
    std::vector<int32_t> chosen;
    std::vector<float> mine = r.run_layer(layer, x, n, topk ? &chosen : nullptr);
    if (&r == ranks_[0].get()) {
      y = std::move(mine);
      if (topk) *topk = std::move(chosen);
    }
  });
  return y;
}

}  // namespace orchid::runtime::cuda
