#include "cli/backend_options.h"

#include <fmt/ranges.h>
#include <algorithm>
#include <limits>
#include <set>

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "engine/draft_model_proposer.h"
#include "model/loader.h"
#include "model/manifest.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/lockstep.h"
#include "runtime/tcp_communicator.h"
#if ORCHID_HAVE_CUDA
#include "runtime/cuda/cuda_backend.h"
#endif

namespace orchid::cli {

void BackendOptions::add_flags(CLI::App* cmd) {
  cmd->add_option("--backend", backend, "auto (cuda when built with CUDA and a GPU is present), cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))
      ->capture_default_str();
  cmd->add_option("--weights", weights,
                  "expert weight format on the GPU: fp8, mxfp4 or bf16 (the CPU computes in fp32)")
      ->check(CLI::IsMember({"fp8", "mxfp4", "bf16"}))
      ->capture_default_str();
  cmd->add_option("--block-size", block_size, "KV cache page size in tokens")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  cmd->add_option("--max-model-len", max_model_len,
                  "longest sequence (prompt + output) to plan the KV cache for")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 30))
      ->capture_default_str();
  cmd->add_option("--kv-pages", kv_pages, "KV pages per pool (0: derived from --max-model-len or GPU memory)")
      ->check(CLI::Range(0, 1 << 30));
  // Checked where the backend is made (kv_dtype()), so a bad value is orchid's error, exit 2.
  cmd->add_option(
         "--kv-cache-dtype", kv_cache_dtype,
         "precision of the KV cache: auto (= bf16), bf16, fp8 or fp8_e4m3 (e4m3 with scale 1.0, half "
         "the bytes a cached token costs; the CPU stores fp32 values rounded through e4m3)")
      ->capture_default_str();
  cmd->add_option("--gpu-memory-utilization", gpu_memory_utilization, "fraction of GPU memory to use")
      ->check(CLI::Range(0.05, 0.99))
      ->capture_default_str();
  cmd->add_option("--max-num-batched-tokens", max_num_batched_tokens, "most tokens in one step")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_flag("--enforce-eager", enforce_eager,
                "never replay CUDA graphs (every decode step launches its kernels)");
  cmd->add_flag(
      "--bf16-routing", bf16_routing,
      "route from BF16 activations (default: router inputs at fp32 accuracy and layer 0's attention "
      "in fp32, so near-tie experts match an fp32 model; docs/design.md)");
  cmd->add_option("--prefill-attention", prefill_attention,
                  "CUDA prefill attention kernel: hopper (TMA + wgmma, pages of >= 8 tokens), mma (FA2-style "
                  "mma.sync, any page size) or auto (hopper where it applies)")
      ->check(CLI::IsMember({"auto", "hopper", "mma"}))
      ->capture_default_str();
  cmd->add_option(
      "--speculative-config", speculative_config,
      "speculative decoding, as JSON: {\"method\": \"ngram\", \"num_speculative_tokens\": K, "
      "\"prompt_lookup_max\": 4, \"prompt_lookup_min\": 2}; {\"method\": \"draft_model\", \"model\": DIR, "
      "...}; {\"method\": \"eagle3\", \"model\": HEAD_DIR | \"synthetic[@seed]\", ...}");
  cmd->add_flag(
      "--async-scheduling", async_scheduling_on,
      "plan and launch each decode step while the one before runs on the device (same outputs; not with "
      "speculative decoding). The default on the CUDA backend");
  cmd->add_flag("--no-async-scheduling", async_scheduling_off,
                "run the steps one at a time (read each step before planning the next)");
  cmd->add_option("--max-num-seqs", max_num_seqs, "most sequences in one step")
      ->check(CLI::Range(1, 1 << 16))
      ->capture_default_str();
  cmd->add_option("--tp", tp, "tensor-parallel ranks: attention heads and lm_head split TP ways")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  cmd->add_option(
         "--ep", ep,
         "expert-parallel ranks: experts split EP ways over runs of EP ranks (0: --tp, every rank of "
         "a replica); with --dp, an --ep that --tp does not divide shares the experts among replicas")
      ->check(CLI::Range(0, 1024))
      ->capture_default_str();
  cmd->add_option(
         "--dp", dp,
         "attention data-parallel replicas, each an engine with its own --tp ranks and KV cache; they "
         "share the experts' ranks (DP attention, stepping in lockstep; CPU backend) when --ep is "
         "more than --tp")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  cmd->add_option("--collectives", collectives,
                  "CUDA ranks: auto (rank r on GPU r, NCCL), local (every rank on one GPU, in-process "
                  "collectives: tests) or nccl (NCCL even for one rank)")
      ->check(CLI::IsMember({"auto", "local", "nccl"}))
      ->capture_default_str();
  cmd->add_option("--dist-init-addr", dist_init_addr,
                  "HOST:PORT where rank 0 of a multi-process group listens (with --nnodes, --node-rank)");
  cmd->add_option("--nnodes", nnodes, "processes in the group (one rank each on the CPU backend)")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  cmd->add_option("--node-rank", node_rank, "this process's rank in the group (0 runs the command)")
      ->check(CLI::Range(0, 1023))
      ->capture_default_str();
}

namespace {
std::shared_ptr<runtime::Communicator> process_group(const BackendOptions& b) {
  if (b.nnodes <= 1) {
    if (b.node_rank != 0) fail("--node-rank {} needs --nnodes > {}", b.node_rank, b.node_rank);
    return nullptr;
  }
  if (b.dist_init_addr.empty())
    fail("--nnodes {} needs --dist-init-addr HOST:PORT (rank 0's address)", b.nnodes);
  return runtime::connect_tcp_group(b.dist_init_addr, b.nnodes, b.node_rank);
}
}  // namespace

bool BackendOptions::run_as_worker(const std::string& model) const {
  if (nnodes <= 1 || node_rank == 0) return false;
  auto backend = create(model);
  auto* cpu = dynamic_cast<runtime::cpu::CpuBackend*>(backend.get());
  ORCHID_CHECK(cpu != nullptr, "worker ranks run on the CPU backend");
  spdlog::info("rank {} of {}: serving rank 0's steps", node_rank, nnodes);
  cpu->serve_worker();
  spdlog::info("rank {} of {}: rank 0 closed the group", node_rank, nnodes);
  return true;
}

bool BackendOptions::async_scheduling() const {
  if (async_scheduling_on && async_scheduling_off)
    fail("--async-scheduling and --no-async-scheduling: pick one");
  return async_scheduling_on || (!async_scheduling_off && uses_cuda());
}

bool BackendOptions::uses_cuda() const {
#if ORCHID_HAVE_CUDA
  return backend == "cuda" || (backend == "auto" && runtime::cuda::cuda_device_available());
#else
  return false;
#endif
}

namespace {
runtime::cpu::CpuBackendOptions cpu_options(const BackendOptions& b) {
  if (b.collectives != "auto") fail("--collectives {} is for the CUDA backend", b.collectives);
  if (b.prefill_attention != "auto")
    fail("--prefill-attention {} is for the CUDA backend", b.prefill_attention);
  if (b.dp > 1 && b.nnodes > 1)
    fail("--dp {} with --nnodes {}: attention replicas run as threads of one process so far", b.dp, b.nnodes);
  runtime::cpu::CpuBackendOptions o;
  o.kv_cache_dtype = b.kv_dtype();
  o.kv_share_bytes = b.kv_share_bytes;
  o.kv_share_timeout_ms = b.kv_share_timeout_ms;
  o.page_size = b.block_size;
  o.max_tokens = b.max_model_len > 0 ? b.max_model_len : 8192;
  o.num_full_pages = o.num_sliding_pages = b.kv_pages;
  o.parallel = b.parallel();
  o.process_group = process_group(b);
  if (const engine::SpeculativeConfig spec = b.speculative(); spec.method == "eagle3")
    o.eagle3_head = spec.model;
  return o;
}
}  // namespace

model::ParallelConfig BackendOptions::parallel() const {
  model::ParallelConfig pc;
  pc.tp = tp;
  pc.dp = dp;
  pc.ep = ep > 0 ? ep : tp;
  return pc;
}

std::unique_ptr<runtime::Backend> BackendOptions::create(const std::string& model) const {
  if (dp > 1) {
    auto replicas = create_replicas(model);
    return std::make_unique<runtime::LeadReplica>(std::move(replicas));
  }
  [[maybe_unused]] const model::ParallelConfig pc = parallel();  // checks the flags on every build
  std::string which = backend;
#if ORCHID_HAVE_CUDA
  if (which == "auto") which = runtime::cuda::cuda_device_available() ? "cuda" : "cpu";
  if (which == "cuda") {
    if (nnodes > 1)
      fail(
          "--nnodes {} on the CUDA backend: a node's GPUs are ranks of one process (--tp/--ep); groups of "
          "processes run the CPU backend so far",
          nnodes);
    runtime::cuda::CudaBackendOptions o;
    o.parallel = pc;
    o.share_device = collectives == "local";
    o.force_nccl = collectives == "nccl";
    o.first_device = first_gpu;
    o.weights = weights;
    o.page_size = block_size;
    o.max_step_tokens = max_num_batched_tokens;
    o.max_step_seqs = max_num_seqs;
    const engine::SpeculativeConfig spec = speculative();
    if (spec.method == "eagle3") o.eagle3_head = spec.model;
    o.max_draft_tokens = spec.enabled() ? spec.num_speculative_tokens : 0;
    o.max_model_len = max_model_len > 0 ? max_model_len : 131072;
    // A draft model on the same GPUs gets its share of the fraction (draft_proposer creates it after this
    // backend, on what this one leaves).
    const double draft_share = spec.method == "draft_model"
                                   ? draft_memory_share(model::load_config(model::parse_model_ref(model)))
                                   : 0.0;
    o.gpu_memory_utilization = gpu_memory_utilization * (1.0 - draft_share);
    o.kv_pages = kv_pages;
    o.kv_cache_dtype = kv_dtype();
    o.kv_share_bytes = kv_share_bytes;
    o.kv_share_timeout_ms = kv_share_timeout_ms;
    o.cuda_graphs = !enforce_eager;
    o.precise_routing = !bf16_routing;
    if (prefill_attention == "hopper" && block_size < 8)
      fail("--prefill-attention hopper needs --block-size >= 8 (got {})", block_size);
    o.hopper_prefill_attention =
        prefill_attention == "hopper" || (prefill_attention == "auto" && block_size >= 8);
    return std::make_unique<runtime::cuda::CudaBackend>(model, o);
  }
#else
  if (which == "auto") which = "cpu";
  if (which == "cuda") fail("--backend cuda: this orchid was built without CUDA (use the `cuda` preset)");
#endif
  return runtime::cpu::CpuBackend::create(model, cpu_options(*this));
}

std::vector<std::shared_ptr<runtime::Backend>> BackendOptions::create_replicas(
    const std::string& model) const {
  std::vector<std::shared_ptr<runtime::Backend>> out;
  if (dp == 1) {
    out.push_back(create(model));
    return out;
  }
  const model::ParallelConfig pc = parallel();
  if (!uses_cuda() && backend == "cuda")
    fail("--backend cuda: this orchid was built without CUDA (use the `cuda` preset)");
  if (uses_cuda()) {
    if (pc.shares_experts())
      fail(
          "--dp {} --ep {}: attention replicas sharing the experts (--ep not dividing --tp {}) run on the "
          "CPU "
          "backend only so far; on the GPUs use an --ep that divides --tp (each replica holds every expert)",
          dp, pc.ep, tp);
    if (collectives == "local") fail("--dp {} with --collectives local: replicas need GPUs of their own", dp);
    BackendOptions one = *this;  // replica i on GPUs [i * TP, (i + 1) * TP)
    one.dp = 1;
    one.ep = pc.ep;
    for (int i = 0; i < dp; ++i) {
      one.first_gpu = first_gpu + i * tp;
      out.push_back(one.create(model));
    }
    return out;
  }
  for (auto& r : runtime::cpu::CpuBackend::create_replicas(model, cpu_options(*this)))
    out.push_back(std::move(r));
  return out;
}

engine::SpeculativeConfig BackendOptions::speculative() const {
  engine::SpeculativeConfig c;
  if (speculative_config.empty()) return c;
  const auto j = nlohmann::json::parse(speculative_config, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) fail("--speculative-config: expected a JSON object, got '{}'", speculative_config);
  static const std::set<std::string> known = {"method", "model", "num_speculative_tokens",
                                              "prompt_lookup_max", "prompt_lookup_min"};
  for (const auto& [key, value] : j.items())
    if (!known.count(key))
      fail("--speculative-config: unknown key '{}' (known: {})", key, fmt::join(known, ", "));
  auto integer = [&](const char* key, int32_t& out) {
    if (!j.contains(key)) return false;
    if (!j[key].is_number_integer()) fail("--speculative-config: {} must be an integer", key);
    out = j[key].get<int32_t>();
    return true;
  };
  if (!j.contains("method") || !j["method"].is_string()) fail("--speculative-config: \"method\" is required");
  c.method = j["method"].get<std::string>();
  if (!integer("num_speculative_tokens", c.num_speculative_tokens))
    fail("--speculative-config: \"num_speculative_tokens\" is required");
  if (integer("prompt_lookup_max", c.prompt_lookup_max) && !j.contains("prompt_lookup_min"))
    c.prompt_lookup_min = std::min(c.prompt_lookup_min, c.prompt_lookup_max);
  integer("prompt_lookup_min", c.prompt_lookup_min);
  if (j.contains("model")) {
    if (!j["model"].is_string() || j["model"].get<std::string>().empty())
      fail("--speculative-config: \"model\" must be a model directory or synthetic:NAME");
    c.model = j["model"].get<std::string>();
  }
  if (c.method == "draft_model" || c.method == "eagle3") {
    if (c.model.empty())
      fail("--speculative-config: method {} needs \"model\" ({})", c.method,
           c.method == "eagle3" ? "the head's directory, or synthetic[@seed]" : "the draft checkpoint");
    if (c.num_speculative_tokens < 1 || c.num_speculative_tokens > 16)
      fail("--speculative-config: num_speculative_tokens {} (must be 1..16)", c.num_speculative_tokens);
  } else {
    engine::make_proposer(c);  // every remaining check, now rather than when the engine starts
  }
  return c;
}

double BackendOptions::draft_memory_share(const model::ModelConfig& target_config) const {
  const engine::SpeculativeConfig spec = speculative();
  if (spec.method != "draft_model") return 0.0;
  const double draft =
      double(model::weight_bytes(model::load_config(model::parse_model_ref(spec.model)), weights));
  const double target = double(model::weight_bytes(target_config, weights));
  return std::clamp(draft / (draft + target), 0.05, 0.5);
}

std::shared_ptr<engine::Proposer> BackendOptions::draft_proposer(const engine::SpeculativeConfig& c,
                                                                 const runtime::Backend& target) const {
  if (c.method != "draft_model") return nullptr;
  // Before loading anything: a backend that cannot verify drafts has no use for a draft model.
  if (target.max_draft_tokens() < c.num_speculative_tokens)
    fail("speculative decoding: the {} backend verifies at most {} drafts per sequence ({} asked)",
         target.name(), target.max_draft_tokens(), c.num_speculative_tokens);
  BackendOptions plain = *this;  // the draft itself verifies nothing
  plain.kv_share_bytes = 0;      // nor hands K/V over
  plain.gpu_memory_utilization = gpu_memory_utilization * draft_memory_share(target.model_config());
  plain.speculative_config.clear();
  plain.dp = 1;  // one draft per engine (replica), its experts its own
  plain.ep = 0;
  std::shared_ptr<runtime::Backend> draft = plain.create(c.model);
  if (draft->model_config().vocab_size != target.model_config().vocab_size)
    fail("speculative decoding: the draft model {} has a vocabulary of {} tokens, the target {}", c.model,
         draft->model_config().vocab_size, target.model_config().vocab_size);
  return std::make_shared<engine::DraftModelProposer>(std::move(draft), std::numeric_limits<int32_t>::max());
}

}  // namespace orchid::cli
