// The sharding plan for 1, 2, 4 and 8 ranks and every TP x DP x EP combination that divides them, on the
// 20b, 120b and tiny shapes: every query/KV head, expert and vocabulary row owned exactly once per group, GQA
// groups kept whole, bytes per rank as the roles say (attention and lm_head split TP ways, experts EP ways,
// the rest replicated), and the errors for what does not divide.
#include "model/parallel.h"

#include <gtest/gtest.h>

#include <fmt/format.h>

#include <map>
#include <set>

#include "core/error.h"
#include "model/config.h"
#include "model/manifest.h"

namespace orchid::model {
namespace {

std::vector<ParallelConfig> configs_for(int world) {
  std::vector<ParallelConfig> out;
  for (int tp = 1; tp <= world; ++tp) {
    if (world % tp) continue;
    for (int ep = 1; ep <= world; ++ep)
      if (world % ep == 0) out.push_back({tp, world / tp, ep});
  }
  return out;
}

bool tp_sharded(TensorRole r) {  // written from the design, independently of slice_of
  return r == TensorRole::kQProj || r == TensorRole::kQBias || r == TensorRole::kKProj ||
         r == TensorRole::kKBias || r == TensorRole::kVProj || r == TensorRole::kVBias ||
         r == TensorRole::kOProj || r == TensorRole::kSinks || r == TensorRole::kLmHead;
}

void check_plan(const ModelConfig& c, const ParallelConfig& pc, const std::string& weights) {
  SCOPED_TRACE(c.name + " " + pc.describe() + " " + weights);
  const ShardPlan plan = make_shard_plan(c, pc, weights);
  ASSERT_EQ(int(plan.ranks.size()), pc.world());
  // Per DP replica: heads and vocabulary rows exactly once over its TP ranks.
  for (int dp = 0; dp < pc.dp; ++dp) {
    std::vector<int> q(size_t(c.num_heads), 0), kv(size_t(c.num_kv_heads), 0);
    int64_t vocab = 0;
    for (const auto& r : plan.ranks) {
      if (r.dp_rank != dp) continue;
      for (int64_t h = r.q_head_begin; h < r.q_head_end; ++h) ++q[size_t(h)];
      for (int64_t h = r.kv_head_begin; h < r.kv_head_end; ++h) ++kv[size_t(h)];
      vocab += r.vocab_end - r.vocab_begin;
      // GQA: a rank's query heads are exactly those of its KV heads.
      const int64_t group = c.num_heads / c.num_kv_heads;
      EXPECT_EQ(r.q_head_begin, r.kv_head_begin * group);
      EXPECT_EQ(r.q_head_end, r.kv_head_end * group);
      EXPECT_EQ(r.adds_o_bias, r.tp_rank == 0);
    }
    for (int v : q) EXPECT_EQ(v, 1);
    for (int v : kv) EXPECT_EQ(v, 1);
    EXPECT_EQ(vocab, c.vocab_size);
  }
  // Experts: each EP group (ranks with distinct ep_rank that hold one copy) owns every expert once; ranks
  // with the same ep_rank hold the same experts.
  std::map<int, std::pair<int64_t, int64_t>> by_ep;
  std::vector<int> owners(size_t(c.num_experts), 0);
  for (const auto& r : plan.ranks) {
    auto [it, fresh] = by_ep.emplace(r.ep_rank, std::pair{r.expert_begin, r.expert_end});
    if (fresh) {
      for (int64_t e = r.expert_begin; e < r.expert_end; ++e) ++owners[size_t(e)];
    } else {
      EXPECT_EQ(it->second, std::pair(r.expert_begin, r.expert_end));
    }
    EXPECT_EQ(r.num_experts(), c.num_experts / pc.ep);
  }
  for (int v : owners) EXPECT_EQ(v, 1);
  // EP groups: runs of EP ranks; a group whose ranks are of several replicas shares its experts among them.
  bool any_shared = false;
  for (const auto& r : plan.ranks) {
    EXPECT_EQ(r.ep_group_begin, r.rank - r.ep_rank);
    std::set<int> replicas;
    for (int q = r.ep_group_begin; q < r.ep_group_begin + pc.ep; ++q)
      replicas.insert(plan.ranks[size_t(q)].dp_rank);
    EXPECT_EQ(r.shared_experts, replicas.size() > 1) << "rank " << r.rank;
    any_shared = any_shared || r.shared_experts;
  }
  EXPECT_EQ(pc.shares_experts(), any_shared);
  // Bytes per rank from the roles: TP-sharded dense tensors / TP, experts / EP, the rest whole.
  uint64_t replicated = 0, tp_part = 0, expert_biases = 0;
  for (const auto& t : gpt_oss_manifest(c)) {
    if (is_expert_weight(t.role)) continue;
    uint64_t n = 2;
    for (int64_t d : t.shape) n *= uint64_t(d);
    if (t.role == TensorRole::kGateUpBias || t.role == TensorRole::kDownBias)
      expert_biases += n;
    else if (tp_sharded(t.role))
      tp_part += n;
    else
      replicated += n;
  }
  const uint64_t want = replicated + tp_part / uint64_t(pc.tp) + expert_biases / uint64_t(pc.ep) +
                        expert_weight_bytes(c, weights) / uint64_t(pc.ep);
  for (const auto& r : plan.ranks) EXPECT_EQ(r.weight_bytes, want) << "rank " << r.rank;
  if (pc.world() == 1) {
    EXPECT_EQ(plan.ranks[0].weight_bytes, weight_bytes(c, weights));
  }
  // The slices of one rank, as loading reads them.
  const auto& r = plan.ranks.back();
  for (const auto& t : gpt_oss_manifest(c)) {
    const TensorSlice s = r.slice_of(t, c);
    if (s.replicated()) continue;
    ASSERT_LT(size_t(s.dim), t.shape.size());
    EXPECT_GE(s.begin, 0);
    EXPECT_LE(s.end, t.shape[size_t(s.dim)]);
    EXPECT_LT(s.begin, s.end);
  }
}

TEST(ShardPlan, EveryCombinationOfOneToEightRanks) {
  for (const char* preset : {"20b", "120b", "tiny"}) {
    const ModelConfig c = preset_config(preset);
    int checked = 0;
    for (int world : {1, 2, 4, 8})
      for (const ParallelConfig& pc : configs_for(world)) {
        bool divides = c.num_kv_heads % pc.tp == 0 && c.num_experts % pc.ep == 0 && c.vocab_size % pc.tp == 0;
        if (!divides) {
          EXPECT_THROW(make_shard_plan(c, pc, "mxfp4"), Error) << preset << " " << pc.describe();
          continue;
        }
        for (const char* w : {"mxfp4", "fp8", "bf16"}) check_plan(c, pc, w);
        ++checked;
      }
    EXPECT_GT(checked, 10) << preset;
  }
}

TEST(ShardPlan, SeedConfigurations) {
  const ModelConfig c = preset_config("20b");
  for (int n : {1, 2, 4, 8}) {
    const ShardPlan plan = make_shard_plan(c, {n, 1, n}, "mxfp4");
    EXPECT_EQ(plan.config.describe(), fmt::format("EP{} DP1 TP{}", n, n));
    const auto& r = plan.ranks.back();
    EXPECT_EQ(r.num_kv_heads(), 8 / n);
    EXPECT_EQ(r.num_q_heads(), 64 / n);
    EXPECT_EQ(r.num_experts(), 32 / n);
    const std::string text = plan.describe(c);
    EXPECT_NE(text.find("rank " + std::to_string(n - 1)), std::string::npos) << text;
    EXPECT_NE(text.find("GiB"), std::string::npos);
  }
  // Per-rank bytes shrink with the group: the experts dominate.
  EXPECT_LT(make_shard_plan(c, {8, 1, 8}, "mxfp4").ranks[0].weight_bytes,
            make_shard_plan(c, {1, 1, 1}, "mxfp4").ranks[0].weight_bytes / 4);
}

TEST(ShardPlan, ReplicasShareTheExpertsWhereEpGroupsSpanThem) {
  const ModelConfig c = preset_config("20b");
  struct Case {
    ParallelConfig pc;
    bool shared;
  };
  for (const Case& k :
       {Case{{1, 4, 4}, true}, Case{{2, 4, 8}, true}, Case{{2, 2, 4}, true}, Case{{1, 8, 2}, true},
        Case{{2, 2, 2}, false}, Case{{4, 2, 2}, false}, Case{{1, 4, 1}, false}, Case{{8, 1, 8}, false}}) {
    SCOPED_TRACE(k.pc.describe());
    const ShardPlan plan = make_shard_plan(c, k.pc, "mxfp4");
    EXPECT_EQ(k.pc.shares_experts(), k.shared);
    for (const auto& r : plan.ranks) EXPECT_EQ(r.shared_experts, k.shared) << "rank " << r.rank;
    const std::string text = plan.describe(c);
    if (k.pc.dp > 1) {
      EXPECT_NE(text.find(k.shared ? "replicas sharing the experts" : "replicas, each holding every expert"),
                std::string::npos)
          << text;
    }
  }
  // EP4 DP4 TP2: two groups of four ranks, each shared by two replicas.
  const ShardPlan plan = make_shard_plan(c, {2, 4, 4}, "mxfp4");
  EXPECT_EQ(plan.ranks[5].ep_group_begin, 4);
  EXPECT_NE(plan.describe(c).find("shared by ranks [4, 8)"), std::string::npos);
}

void expect_error(const ModelConfig& c, const ParallelConfig& pc, int devices, const std::string& needle) {
  try {
    validate_parallel(c, pc, devices);
    ADD_FAILURE() << pc.describe() << ": no error, expected one naming '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(ShardPlan, ClearErrors) {
  const ModelConfig c20 = preset_config("20b");
  expect_error(c20, {3, 1, 1}, -1, "--tp 3 must divide the 8 KV heads");
  expect_error(c20, {16, 1, 16}, -1, "--tp 16 must divide the 8 KV heads");
  expect_error(c20, {1, 1, 3}, -1, "--ep 3 must divide the 32 experts");
  expect_error(c20, {2, 2, 8}, -1, "--ep 8 must divide the 4 ranks");
  expect_error(c20, {4, 1, 4}, 2, "needs 4 GPUs; 2 are present");
  expect_error(c20, {2, 1, 2}, 1, "needs 2 GPUs; 1 is present");
  expect_error(c20, {0, 1, 1}, -1, "must be positive");
  EXPECT_NO_THROW(validate_parallel(c20, {8, 1, 8}, 8));
  EXPECT_NO_THROW(validate_parallel(preset_config("120b"), {4, 2, 8}, 8));
}

}  // namespace
}  // namespace orchid::model
