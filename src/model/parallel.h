// How gpt-oss is split over the ranks (GPUs, or threads of the CPU backend) of one parallel group, as the
// seed deploys it (EP x DP x TP on the GPUs of a node):
//   attention  heads split TP ways (each rank: num_kv_heads/TP KV heads, their query heads and sinks); QKV
//              column-parallel, O row-parallel, an all-reduce after O. DP replicas of the attention each
//              own their sequences and KV.
//   MoE        experts split EP ways over the ranks; EP groups are runs of EP consecutive ranks. Within a
//              replica (EP divides TP) the routed input is replicated on every rank of the group, each rank
//              runs its local experts, the weighted combine is all-reduced over the group. An EP group that
//              holds ranks of several DP replicas (EP does not divide TP: SGLang's DP attention, vLLM's
//              DP + EP) shares its experts among them: each rank all-gathers the routed inputs of the
//              group's tokens (every replica's, variable counts), runs its experts on all of them, and a
//              reduce-scatter returns each rank the combine of its own replica's tokens; those replicas
//              then step in lockstep. The expert intermediate dimension is never split (2880 = 90 MXFP4
//              blocks: 4 and 8 don't divide it).
//   lm_head    vocab-parallel over TP (the logits are gathered); embedding, norms and router replicated.
// Rank r has tp_rank = r % TP, dp_rank = r / TP and ep_rank = r % EP (EP divides world = TP * DP; with
// EP < world, world / EP groups hold the same experts). Biases of row-parallel layers (O, down) are added by
// one rank per reduce group, so the reduced sum holds them once.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "model/config.h"
#include "model/manifest.h"

namespace orchid::model {

struct ParallelConfig {
  int tp = 1, dp = 1, ep = 1;
  int world() const { return tp * dp; }
  // Some EP group holds ranks of several DP replicas (EP does not divide TP): the replicas share the
  // experts, and their steps run together.
  bool shares_experts() const { return dp > 1 && tp % ep != 0; }
  std::string describe() const;  // "EP4 DP1 TP4", as the seed names configurations
};

// The part of a tensor one rank holds: [begin, end) along `dim`, or the whole tensor (dim < 0).
struct TensorSlice {
  int dim = -1;
  int64_t begin = 0, end = 0;
  bool replicated() const { return dim < 0; }
};

struct RankShard {
  int rank = 0, tp_rank = 0, dp_rank = 0, ep_rank = 0;
  int64_t q_head_begin = 0, q_head_end = 0;    // query heads (and sinks)
  int64_t kv_head_begin = 0, kv_head_end = 0;  // KV heads (and the KV cache's heads)
  int64_t expert_begin = 0, expert_end = 0;
  int64_t vocab_begin = 0, vocab_end = 0;  // lm_head rows
  bool adds_o_bias = true;                 // tp_rank == 0: the O-projection bias enters the reduce once
  // Its EP group (ranks [ep_group_begin, ep_group_begin + EP)) holds ranks of several replicas: its MoE
  // gathers the group's tokens and reduce-scatters their combine instead of all-reducing its own.
  int ep_group_begin = 0;
  bool shared_experts = false;
  uint64_t weight_bytes = 0;  // this rank's shard, experts in the plan's format

  TensorSlice slice_of(const TensorSpec& t, const ModelConfig& c) const;
  int64_t num_q_heads() const { return q_head_end - q_head_begin; }
  int64_t num_kv_heads() const { return kv_head_end - kv_head_begin; }
  int64_t num_experts() const { return expert_end - expert_begin; }
  bool owns_expert(int64_t e) const { return e >= expert_begin && e < expert_end; }
};

struct ShardPlan {
  ParallelConfig config;
  std::string weights;  // expert format the byte counts assume
  std::vector<RankShard> ranks;
  std::string describe(const ModelConfig& c) const;  // one line per rank: heads, experts, vocab, GiB
};

// Checks that the configuration divides the model (and fits `devices` GPUs; -1: no device limit). Errors name
// the flag and what it must divide.
void validate_parallel(const ModelConfig& c, const ParallelConfig& pc, int devices = -1);

// The plan for every rank; validates first. `weights`: bf16 | fp8 | mxfp4 (the expert format for the bytes).
ShardPlan make_shard_plan(const ModelConfig& c, const ParallelConfig& pc, std::string_view weights);

}  // namespace orchid::model
