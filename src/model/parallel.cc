#include "model/parallel.h"

#include <fmt/format.h>

#include "core/error.h"

namespace orchid::model {

std::string ParallelConfig::describe() const {
  return fmt::format("EP{} DP{} TP{}", ep, dp, tp);
}

void validate_parallel(const ModelConfig& c, const ParallelConfig& pc, int devices) {
  if (pc.tp < 1 || pc.dp < 1 || pc.ep < 1)
    fail("--tp, --dp and --ep must be positive (got TP{} DP{} EP{})", pc.tp, pc.dp, pc.ep);
  if (c.num_kv_heads % pc.tp != 0)
    fail("--tp {} must divide the {} KV heads of {} (TP splits attention by KV head)", pc.tp, c.num_kv_heads,
         c.name);
  if (c.num_heads % pc.tp != 0)
    fail("--tp {} must divide the {} attention heads of {}", pc.tp, c.num_heads, c.name);
  if (c.vocab_size % pc.tp != 0)
    fail("--tp {} must divide the vocabulary of {} ({} rows of lm_head)", pc.tp, c.name, c.vocab_size);
  if (c.num_experts % pc.ep != 0)
    fail("--ep {} must divide the {} experts of {}", pc.ep, c.num_experts, c.name);
  if (pc.world() % pc.ep != 0)
    fail("--ep {} must divide the {} ranks of --tp {} x --dp {} (the experts are spread over the ranks)",
         pc.ep, pc.world(), pc.tp, pc.dp);
  if (devices >= 0 && pc.world() > devices)
    fail("--tp {} x --dp {} needs {} GPUs; {} {} present", pc.tp, pc.dp, pc.world(), devices,
         devices == 1 ? "is" : "are");
}

TensorSlice RankShard::slice_of(const TensorSpec& t, const ModelConfig& c) const {
  const int64_t d = c.head_dim;
  switch (t.role) {
    case TensorRole::kQProj:
    case TensorRole::kQBias:
      return TensorSlice{0, q_head_begin * d, q_head_end * d};
    case TensorRole::kSinks:
      return TensorSlice{0, q_head_begin, q_head_end};
    case TensorRole::kKProj:
    case TensorRole::kKBias:
    case TensorRole::kVProj:
    case TensorRole::kVBias:
      return TensorSlice{0, kv_head_begin * d, kv_head_end * d};
    case TensorRole::kOProj:
      return TensorSlice{1, q_head_begin * d, q_head_end * d};
    case TensorRole::kGateUpBlocks:
    case TensorRole::kGateUpScales:
    case TensorRole::kDownBlocks:
    case TensorRole::kDownScales:
    case TensorRole::kGateUpWeight:
    case TensorRole::kDownWeight:
    case TensorRole::kGateUpBias:
    case TensorRole::kDownBias:
      return TensorSlice{0, expert_begin, expert_end};
    case TensorRole::kLmHead:
      return TensorSlice{0, vocab_begin, vocab_end};
    default:
      return TensorSlice{};
  }
}

ShardPlan make_shard_plan(const ModelConfig& c, const ParallelConfig& pc, std::string_view weights) {
  validate_parallel(c, pc);
  ShardPlan plan;
  plan.config = pc;
  plan.weights = std::string(weights);
  const auto manifest = gpt_oss_manifest(c);
  const uint64_t experts_all = expert_weight_bytes(c, weights);
  for (int r = 0; r < pc.world(); ++r) {
    RankShard s;
    s.rank = r;
    s.tp_rank = r % pc.tp;
    s.dp_rank = r / pc.tp;
    s.ep_rank = r % pc.ep;
    const int64_t qh = c.num_heads / pc.tp, kvh = c.num_kv_heads / pc.tp, ne = c.num_experts / pc.ep;
    const int64_t nv = c.vocab_size / pc.tp;
    s.q_head_begin = s.tp_rank * qh;
    s.q_head_end = s.q_head_begin + qh;
    s.kv_head_begin = s.tp_rank * kvh;
    s.kv_head_end = s.kv_head_begin + kvh;
    s.expert_begin = s.ep_rank * ne;
    s.expert_end = s.expert_begin + ne;
    s.vocab_begin = s.tp_rank * nv;
    s.vocab_end = s.vocab_begin + nv;
    s.adds_o_bias = s.tp_rank == 0;
    s.ep_group_begin = r / pc.ep * pc.ep;
    s.shared_experts = s.ep_group_begin / pc.tp != (s.ep_group_begin + pc.ep - 1) / pc.tp;
    uint64_t dense = 0;
    for (const auto& t : manifest) {
      if (is_expert_weight(t.role)) continue;
      uint64_t n = 1;
      for (int64_t d : t.shape) n *= uint64_t(d);
      const TensorSlice sl = s.slice_of(t, c);
      if (!sl.replicated()) n = n / uint64_t(t.shape[size_t(sl.dim)]) * uint64_t(sl.end - sl.begin);
      dense += 2 * n;
    }
    s.weight_bytes = dense + experts_all / uint64_t(pc.ep);
    plan.ranks.push_back(s);
  }
  return plan;
}

std::string ShardPlan::describe(const ModelConfig& c) const {
  std::string out = fmt::format("{} over {} rank{} ({} experts):", config.describe(), config.world(),
                                config.world() == 1 ? "" : "s", weights);
  if (config.dp > 1)
    out += config.shares_experts()
               ? fmt::format(
                     " {} attention replicas sharing the experts (EP groups of {} ranks span replicas: "
                     "all-gather of their tokens, reduce-scatter of the combine; lockstep steps)",
                     config.dp, config.ep)
               : fmt::format(" {} attention replicas, each holding every expert", config.dp);
  for (const auto& r : ranks)
    out += fmt::format(
        "\n  rank {}: tp {} dp {} ep {} | query heads [{}, {}) KV heads [{}, {}) | experts [{}, {}) "
        "of {}{} | vocab [{}, {}) | weights {:.2f} GiB",
        r.rank, r.tp_rank, r.dp_rank, r.ep_rank, r.q_head_begin, r.q_head_end, r.kv_head_begin, r.kv_head_end,
        r.expert_begin, r.expert_end, c.num_experts,
        r.shared_experts
            ? fmt::format(", shared by ranks [{}, {})", r.ep_group_begin, r.ep_group_begin + config.ep)
            : std::string(),
        r.vocab_begin, r.vocab_end, double(r.weight_bytes) / double(1ull << 30));
  return out;
}

}  // namespace orchid::model
