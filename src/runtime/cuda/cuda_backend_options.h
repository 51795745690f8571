// Options of the CUDA backend (the CLI's flags map onto these: cli/backend_options.cc).
#pragma once

#include <cstdint>
#include <string>

#include "model/parallel.h"
#include "runtime/kv_cache_dtype.h"

namespace orchid::runtime::cuda {

struct CudaBackendOptions {
  std::string weights = "mxfp4";  // expert format: mxfp4 | fp8 | bf16
  int32_t page_size = 16;
  int32_t max_step_tokens = 16384;  // --max-num-batched-tokens
  int32_t max_step_seqs = 256;      // --max-num-seqs
  // Speculative decoding: drafts per sequence the logits and sampler buffers are sized for (0: none; each
  // one costs max_step_seqs rows of vocabulary-wide fp32 logits).
  int32_t max_draft_tokens = 0;
  // An EAGLE-3 head (a directory or synthetic[@seed], model/eagle3.h) proposing up to max_draft_tokens a
  // step on rank 0 (cuda_eagle3.h); empty: none.
  std::string eagle3_head;
  int64_t max_model_len = 131072;  // page-table capacity per sequence
  double gpu_memory_utilization = 0.90;
  int32_t kv_pages = 0;  // full-attention pages (0: everything the memory plan leaves)
  KvCacheDtype kv_cache_dtype = KvCacheDtype::kBf16;  // --kv-cache-dtype (runtime/kv_cache_dtype.h)
  // K/V handed over in place over CUDA IPC (runtime/kv_share.h; --kv-share-buffer on a prefill instance):
  // each rank's export buffer (0: none, pages go as bytes) and how long a lease holds its range.
  uint64_t kv_share_bytes = 0;
  int64_t kv_share_timeout_ms = 60000;
  // Replay captured graphs for greedy decode steps (vLLM's --enforce-eager turns off).
  bool cuda_graphs = true;
  // Routing as an fp32 model would route (cuda_rank.h); --bf16-routing turns it off.
  bool precise_routing = true;
  // Prefill attention on the Hopper kernel (TMA + wgmma, 192-row tiles; needs page_size >= 8), else the
  // mma.sync kernel (--prefill-attention).
  bool hopper_prefill_attention = true;
  // Tensor and expert parallelism over the ranks (model/parallel.h); DP runs separate engines.
  model::ParallelConfig parallel;
  // Every rank on the current GPU, collectives in-process (tests of the parallel code on one GPU); otherwise
  // rank r on GPU r with NCCL.
  bool share_device = false;
  // Collectives through NCCL even for one rank (tests of the NCCL path on one GPU).
  bool force_nccl = false;
  // Rank r runs on GPU first_device + r (serve --dp N: replica i starts at GPU i * TP).
  int first_device = 0;
};

}  // namespace orchid::runtime::cuda
