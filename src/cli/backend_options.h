// Flags shared by every command that runs the model, and the backend they select.
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <string>

#include "engine/speculative_config.h"
#include "model/config.h"
#include "model/parallel.h"
#include "runtime/backend.h"
#include "runtime/kv_cache_dtype.h"

namespace orchid::cli {

struct BackendOptions {
  std::string backend = "auto";   // auto | cpu | cuda
  std::string weights = "mxfp4";  // expert weight format on the GPU: fp8 | mxfp4 | bf16
  int32_t block_size = 16;        // KV page size in tokens
  int64_t max_model_len = 0;      // 0: the model's (CPU: 8192, to size its KV pools)
  int32_t kv_pages = 0;           // 0: derived
  // --kv-cache-dtype: auto | bf16 | fp8 | fp8_e4m3, checked by kv_dtype() when the backend is made.
  std::string kv_cache_dtype = "auto";
  double gpu_memory_utilization = 0.90;
  int32_t max_num_batched_tokens = 16384;  // tokens per step (the GPU workspace is sized for it)
  int32_t max_num_seqs = 256;              // sequences per step
  bool enforce_eager = false;              // no CUDA graphs
  // The engine plans and launches step N+1 while step N runs: --async-scheduling / --no-async-scheduling;
  // by default on where steps run asynchronously (the CUDA backend), off on the CPU backend, which
  // computes a step when it is launched.
  bool async_scheduling_on = false, async_scheduling_off = false;
  bool bf16_routing = false;               // CUDA: no precise routing
  std::string prefill_attention = "auto";  // CUDA prefill attention kernel: auto | hopper | mma
  // Parallel ranks (model/parallel.h); ep 0: --tp (each replica holds every expert). With --dp, an --ep that
  // --tp does not divide makes the replicas share the experts (the CPU backend's lockstep replicas).
  int tp = 1, ep = 0, dp = 1;
  // CUDA collectives: auto (none for one rank, NCCL for several GPUs), local (every rank on one GPU,
  // in-process: tests of the parallel code) or nccl (NCCL even for one rank).
  std::string collectives = "auto";
  int first_gpu = 0;  // CUDA: rank r on GPU first_gpu + r (set by serve --dp for each replica, not a flag)
  // Ranks in separate processes (CPU backend): rank 0 runs the command, ranks > 0 serve its steps.
  std::string dist_init_addr;
  int nnodes = 1, node_rank = 0;
  // --speculative-config, a JSON object as vLLM takes it: {"method": "ngram", "num_speculative_tokens": 4,
  // "prompt_lookup_max": 4, "prompt_lookup_min": 2}.
  std::string speculative_config;
  // K/V handed over in place (runtime/kv_share.h), set by serve --role prefill (--kv-share-buffer,
  // --kv-share-timeout), not flags here: each rank's export buffer (0: none) and a lease's time.
  uint64_t kv_share_bytes = 0;
  int64_t kv_share_timeout_ms = 60000;

  void add_flags(CLI::App* cmd);
  bool uses_cuda() const;                  // what `create` will pick
  bool async_scheduling() const;           // throws orchid::Error when both flags are given
  model::ParallelConfig parallel() const;  // --tp, --dp, --ep (0 resolved)
  // --kv-cache-dtype parsed (runtime/kv_cache_dtype.h); throws orchid::Error naming the flag.
  runtime::KvCacheDtype kv_dtype() const { return runtime::parse_kv_cache_dtype(kv_cache_dtype); }
  // One backend. With --dp N: the N replicas behind a runtime::LeadReplica (replica 0 runs every step, the
  // others take part with empty steps when they share the experts): orchid forward, layer, bench prefill.
  std::unique_ptr<runtime::Backend> create(const std::string& model) const;
  // --dp N: one backend per attention replica, for N engines behind one endpoint. CPU: one copy of the
  // weights; replicas sharing the experts (--ep not dividing --tp) step in lockstep
  // (Backend::lockstep_replicas). CUDA: independent replicas, replica i on GPUs [i * TP, (i + 1) * TP).
  std::vector<std::shared_ptr<runtime::Backend>> create_replicas(const std::string& model) const;
  // For --node-rank > 0: joins the group, serves rank 0's steps until it closes, and returns true; the
  // command then does nothing else. False on rank 0 (and without --nnodes).
  bool run_as_worker(const std::string& model) const;
  // --speculative-config parsed (not enabled when empty); throws orchid::Error naming what is wrong.
  engine::SpeculativeConfig speculative() const;
  // The part of --gpu-memory-utilization a draft model gets on the GPU (the target gets the rest): the
  // draft's share of both models' weight bytes, within [0.05, 0.5] of it; 0 without a draft model.
  double draft_memory_share(const model::ModelConfig& target) const;
  // The proposer of a draft_model config: the draft checkpoint on a backend of its own (these options),
  // checked against the target's vocabulary. Null for any other method.
  std::shared_ptr<engine::Proposer> draft_proposer(const engine::SpeculativeConfig& config,
                                                   const runtime::Backend& target) const;
};

}  // namespace orchid::cli
