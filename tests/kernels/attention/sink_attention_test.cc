// Sink attention kernels (prefill and split-KV decode over the paged cache) against the double-precision
// reference on random inputs: GQA ratios, page sizes, windows, odd lengths, zero-length sequences, empty
// batches, padding tokens and decode slots, and a decode step replayed from a CUDA graph with a new plan.
//
// Cache contents outside what a step may read (positions before the first query's window, after the
// context, pages marked kNoPage, decoy rows of the other table kind) are NaN, so reading them shows up.
//
// FP8 KV cache scenarios store e4m3(x / scale) with a random scale per KV head for K and for V; the reference
// reads the dequantized values (byte's value x scale), so it is the kernels' exact arithmetic target, and
// the tolerance is the BF16 cache's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/attention/attention_plan.h"
#include "kernels/attention/kv_layout.h"
#include "kernels/attention/sink_attention.h"
#include "kernels/common/device_info.h"
#include "tests/kernels/attention/attention_reference.h"
#include "tests/kernels/gpu_test_util.h"

namespace orchid::kernels::attention {
namespace {

using orchid::testing::DeviceBuffer;
using orchid::testing::kPoisonBf16;
using orchid::testing::kPoisonFp8;

struct SeqSpec {
  int num_q;
  int start_pos;
};

struct Scenario {
  int hq = 64, hkv = 8, page_size = 16, window = 0;
  TableKind kind = kFullTable;
  bool sinks = true;
  std::vector<SeqSpec> seqs;
  int extra_tokens = 0;  // padding token rows after the sequences' tokens
  int seq_bucket = 0, decode_bucket = 0, decode_splits = 0;
  int max_decode_queries = 1;  // PlanOptions': > 1 sends verify-sized sequences to the decode kernel
  float q_std = 1.5f, k_std = 1.5f, v_std = 1.0f;
  bool fp8 = false;  // an e4m3 KV cache with per-head scales

  std::string describe() const {
    std::ostringstream s;
    s << (fp8 ? "fp8 kv, " : "") << "hq " << hq << " hkv " << hkv << " page " << page_size << " window "
      << window << " table " << (kind == kFullTable ? "full" : "sliding") << (sinks ? " sinks" : " no-sinks")
      << " splits " << decode_splits << " decode queries <= " << max_decode_queries << " seqs [";
    for (auto& q : seqs) s << "(" << q.num_q << "@" << q.start_pos << ")";
    return s.str() + "]";
  }
};

// Host image of everything a scenario puts on the device, plus what the reference reads.
struct Problem {
  Scenario sc;
  int num_tokens = 0;  // tokens owned by sequences
  int token_rows = 0;  // + padding rows
  std::vector<PlanSequence> plan_seqs;
  std::vector<uint16_t> q;                       // [token_rows][hq][64]
  std::vector<std::vector<float>> k_log, v_log;  // per sequence [ctx][hkv][64]
  std::vector<uint16_t> k_pool, v_pool;          // bf16 cache
  std::vector<uint8_t> k_pool8, v_pool8;         // fp8 cache
  std::vector<float> k_scale, v_scale;           // fp8 cache: per KV head
  std::vector<int32_t> table;
  std::vector<float> sinks;
  int num_pages = 0;
};

Problem make_problem(const Scenario& sc, std::mt19937_64& rng) {
  Problem pr;
  pr.sc = sc;
  const int n = int(sc.seqs.size());
  const int ps = sc.page_size;
  // Token ranges in a shuffled sequence order, so q_start is not monotonic in the sequence index.
  std::vector<int> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  pr.plan_seqs.resize(static_cast<size_t>(n));
  int cursor = 0;
  for (int i : order) {
    pr.plan_seqs[size_t(i)].q_start = cursor;
    pr.plan_seqs[size_t(i)].num_q = sc.seqs[size_t(i)].num_q;
    pr.plan_seqs[size_t(i)].start_pos = sc.seqs[size_t(i)].start_pos;
    cursor += sc.seqs[size_t(i)].num_q;
  }
  pr.num_tokens = cursor;
  pr.token_rows = cursor + sc.extra_tokens;

  // Pages: the first position a step may read is the first query's window start; pages wholly before it
  // are kNoPage in a sliding table. One decoy page (all NaN) backs the other table kind's rows.
  std::vector<int> ctx(static_cast<size_t>(n)), lowest(static_cast<size_t>(n)), pages(static_cast<size_t>(n)),
      kept(static_cast<size_t>(n));
  int needed = 1;
  for (int i = 0; i < n; ++i) {
    ctx[size_t(i)] = sc.seqs[size_t(i)].start_pos + sc.seqs[size_t(i)].num_q;
    lowest[size_t(i)] = sc.window > 0 ? std::max(0, sc.seqs[size_t(i)].start_pos - sc.window + 1) : 0;
    pages[size_t(i)] = (ctx[size_t(i)] + ps - 1) / ps;
    kept[size_t(i)] = sc.kind == kSlidingTable ? pages[size_t(i)] - lowest[size_t(i)] / ps : pages[size_t(i)];
    needed += kept[size_t(i)];
  }
  pr.num_pages = needed + 3;
  std::vector<int32_t> ids(static_cast<size_t>(pr.num_pages));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  size_t next_id = 0;
  const int32_t decoy = ids[next_id++];

  // Table rows in a shuffled order with gaps; both kinds' rows per sequence.
  std::vector<std::vector<int32_t>> rows(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    for (int pg = 0; pg < pages[size_t(i)]; ++pg) {
      const bool drop = sc.kind == kSlidingTable && (pg + 1) * ps <= lowest[size_t(i)];
      rows[size_t(i)].push_back(drop ? kNoPage : ids[next_id++]);
    }
  }
  std::uniform_int_distribution<int> gap(0, 3);
  for (int i : order) {
    for (int g = gap(rng); g > 0; --g) pr.table.push_back(-7);  // never read
    const int32_t mine = int32_t(pr.table.size());
    pr.table.insert(pr.table.end(), rows[size_t(i)].begin(), rows[size_t(i)].end());
    const int32_t other = int32_t(pr.table.size());
    pr.table.insert(pr.table.end(), size_t(pages[size_t(i)]), decoy);
    PlanSequence& s = pr.plan_seqs[size_t(i)];
    s.full_table_begin = sc.kind == kFullTable ? mine : other;
    s.sliding_table_begin = sc.kind == kSlidingTable ? mine : other;
  }
  if (pr.table.empty()) pr.table.push_back(-7);

  const size_t pool_elems = kv_pool_elements(pr.num_pages, sc.hkv, ps);
  if (sc.fp8) {
    pr.k_pool8.assign(pool_elems, kPoisonFp8);
    pr.v_pool8.assign(pool_elems, kPoisonFp8);
    // Scales that are not powers of two, some below 1 (finer steps) and some above (a wider range).
    std::uniform_real_distribution<float> scale(0.3f, 3.0f);
    for (int h = 0; h < sc.hkv; ++h) pr.k_scale.push_back(scale(rng)), pr.v_scale.push_back(scale(rng));
  } else {
    pr.k_pool.assign(pool_elems, kPoisonBf16);
    pr.v_pool.assign(pool_elems, kPoisonBf16);
  }
  pr.k_log.resize(static_cast<size_t>(n));
  pr.v_log.resize(static_cast<size_t>(n));
  std::normal_distribution<float> kd(0.0f, sc.k_std), vd(0.0f, sc.v_std);
  for (int i = 0; i < n; ++i) {
    const size_t elems = size_t(ctx[size_t(i)]) * sc.hkv * 64;
    pr.k_log[size_t(i)].assign(elems, 0.0f);
    pr.v_log[size_t(i)].assign(elems, 0.0f);
    for (int t = lowest[size_t(i)]; t < ctx[size_t(i)]; ++t) {
      const int32_t page = rows[size_t(i)][size_t(t / ps)];
      EXPECT_GE(page, 0);
      for (int h = 0; h < sc.hkv; ++h)
        for (int d = 0; d < 64; ++d) {
          const size_t at = ((size_t(page) * sc.hkv + h) * ps + size_t(t % ps)) * 64 + d;
          const size_t log = (size_t(t) * sc.hkv + h) * 64 + d;
          if (sc.fp8) {
            const float ks = pr.k_scale[size_t(h)], vs = pr.v_scale[size_t(h)];
            const uint8_t kb = float_to_fp8e4m3(kd(rng) / ks), vb = float_to_fp8e4m3(vd(rng) / vs);
            pr.k_pool8[at] = kb;
            pr.v_pool8[at] = vb;
            pr.k_log[size_t(i)][log] = fp8e4m3_to_float(kb) * ks;
            pr.v_log[size_t(i)][log] = fp8e4m3_to_float(vb) * vs;
          } else {
            const uint16_t kb = float_to_bf16(kd(rng)), vb = float_to_bf16(vd(rng));
            pr.k_pool[at] = kb;
            pr.v_pool[at] = vb;
            pr.k_log[size_t(i)][log] = bf16_to_float(kb);
            pr.v_log[size_t(i)][log] = bf16_to_float(vb);
          }
        }
    }
  }
  pr.q = orchid::testing::random_bf16(rng, size_t(pr.token_rows) * sc.hq * 64, sc.q_std);
  std::uniform_real_distribution<float> sd(-3.0f, 6.0f);
  for (int h = 0; h < sc.hq; ++h) pr.sinks.push_back(round_to_bf16(sd(rng)));  // checkpoint sinks are bf16
  return pr;
}

// Device copies of a Problem's inputs. Capacities may exceed a problem's sizes (graph replay reuses them).
struct DeviceProblem {
  DeviceBuffer<uint16_t> q, k_pool, v_pool, out;
  DeviceBuffer<uint8_t> k_pool8, v_pool8;
  DeviceBuffer<int32_t> table, blob;
  DeviceBuffer<float> sinks, k_scale, v_scale;
  DeviceBuffer<uint8_t> workspace;
};

template <typename T>
void copy_into(DeviceBuffer<T>& dst, const std::vector<T>& src, size_t capacity) {
  if (dst.size() < std::max(capacity, src.size())) dst.resize(std::max(capacity, src.size()));
  if (!src.empty())
    ORCHID_CUDA_CHECK(cudaMemcpy(dst.get(), src.data(), src.size() * sizeof(T), cudaMemcpyHostToDevice));
}

PlanOptions plan_options(const Scenario& sc) {
  PlanOptions o;
  o.num_q_heads = sc.hq;
  o.num_kv_heads = sc.hkv;
  o.sm_count = device_info().sm_count;
  o.seq_bucket = sc.seq_bucket;
  o.decode_bucket = sc.decode_bucket;
  o.decode_splits = sc.decode_splits;
  o.max_decode_queries = sc.max_decode_queries;
  o.window = sc.window;  // automatic splits: window launches take their own (smaller) count
  return o;
}

void upload(const Problem& pr, const AttentionPlanBuilder& plan, DeviceProblem& d) {
  copy_into(d.q, pr.q, d.q.size());
  copy_into(d.k_pool, pr.k_pool, d.k_pool.size());
  copy_into(d.v_pool, pr.v_pool, d.v_pool.size());
  copy_into(d.k_pool8, pr.k_pool8, d.k_pool8.size());
  copy_into(d.v_pool8, pr.v_pool8, d.v_pool8.size());
  copy_into(d.k_scale, pr.k_scale, d.k_scale.size());
  copy_into(d.v_scale, pr.v_scale, d.v_scale.size());
  copy_into(d.table, pr.table, d.table.size());
  copy_into(d.sinks, pr.sinks, d.sinks.size());
  copy_into(d.blob, plan.blob(), d.blob.size());
  std::vector<uint16_t> poison(size_t(pr.token_rows) * pr.sc.hq * 64, kPoisonBf16);
  copy_into(d.out, poison, d.out.size());
  if (d.workspace.size() < plan.workspace_bytes()) d.workspace.resize(plan.workspace_bytes());
}

SinkAttentionArgs make_args(const Problem& pr, const DeviceProblem& d) {
  SinkAttentionArgs a;
  a.q = reinterpret_cast<const __nv_bfloat16*>(d.q.get());
  if (pr.sc.fp8) {
    a.k_pool = d.k_pool8.get();
    a.v_pool = d.v_pool8.get();
    a.kv_fp8 = true;
    a.k_scale = d.k_scale.get();
    a.v_scale = d.v_scale.get();
  } else {
    a.k_pool = d.k_pool.get();
    a.v_pool = d.v_pool.get();
  }
  a.page_table = d.table.get();
  a.table_kind = pr.sc.kind;
  a.page_size = pr.sc.page_size;
  a.num_pages = pr.num_pages;
  a.sinks = pr.sc.sinks ? d.sinks.get() : nullptr;
  a.window = pr.sc.window;
  a.softmax_scale = 0.125f;
  a.out = reinterpret_cast<__nv_bfloat16*>(d.out.get());
  return a;
}

// Checks the device output against the reference: every owned token row within tolerance (and written),
// every padding row untouched.
// Sequence of each token row (-1: padding).
std::vector<int> token_owner(const Problem& pr) {
  std::vector<int> token_seq(size_t(pr.token_rows), -1);
  for (size_t s = 0; s < pr.plan_seqs.size(); ++s)
    for (int i = 0; i < pr.plan_seqs[s].num_q; ++i) token_seq[size_t(pr.plan_seqs[s].q_start + i)] = int(s);
  return token_seq;
}

// The double-precision reference output [token_rows][hq][64] (zero on padding rows).
std::vector<double> reference_output(const Problem& pr) {
  const Scenario& sc = pr.sc;
  const int group = sc.hq / sc.hkv;
  const size_t row = size_t(sc.hq) * 64;
  std::vector<double> ref(size_t(pr.token_rows) * row, 0.0);
  std::vector<float> qf = orchid::testing::bf16_to_floats(pr.q);
  struct Item {
    int seq, i;
  };
  std::vector<Item> items;
  for (size_t s = 0; s < pr.plan_seqs.size(); ++s)
    for (int i = 0; i < pr.plan_seqs[s].num_q; ++i) items.push_back({int(s), i});
  reference::parallel_for(items.size(), [&](size_t it) {
    const PlanSequence& s = pr.plan_seqs[size_t(items[it].seq)];
    const int tok = s.q_start + items[it].i;
    const int pos = s.start_pos + items[it].i;
    const int lo = sc.window > 0 ? std::max(0, pos - sc.window + 1) : 0;
    for (int h = 0; h < sc.hq; ++h)
      reference::sink_attention_row(&qf[size_t(tok) * row + size_t(h) * 64], pr.k_log[size_t(items[it].seq)],
                                    pr.v_log[size_t(items[it].seq)], sc.hkv, h / group, lo, pos, 0.125,
                                    sc.sinks ? &pr.sinks[size_t(h)] : nullptr,
                                    &ref[size_t(tok) * row + size_t(h) * 64]);
  });
  return ref;
}

void check_output(const Problem& pr, const std::vector<double>& ref, const std::vector<uint16_t>& out_bits) {
  const Scenario& sc = pr.sc;
  const size_t row = size_t(sc.hq) * 64;
  const std::vector<int> token_seq = token_owner(pr);
  const std::vector<float> got = orchid::testing::bf16_to_floats(out_bits);
  auto owned = [&](size_t i) { return token_seq[i / row] >= 0; };
  auto where = [&](size_t i) {
    const size_t tok = i / row;
    const int s = token_seq[tok];
    std::ostringstream o;
    o << "token " << tok << " (seq " << s << ", query " << (int(tok) - pr.plan_seqs[size_t(s)].q_start)
      << ", pos " << pr.plan_seqs[size_t(s)].start_pos + int(tok) - pr.plan_seqs[size_t(s)].q_start
      << ") head " << (i % row) / 64 << " dim " << i % 64;
    return o.str();
  };
  // bf16 operands and probabilities: a few 1e-3 relative is expected; 2e-2 absolute bounds any element
  // (outputs are convex-ish combinations of unit-variance V), 1e-2 relative L2 the whole.
  const auto c = orchid::testing::compare(got, ref, 2e-2, 2e-2, owned, where);
  EXPECT_TRUE(c.ok(1e-2)) << sc.describe() << "\n  " << c.summary();
  size_t touched = 0;
  int64_t first = -1;
  for (size_t i = 0; i < out_bits.size(); ++i)
    if (!owned(i) && out_bits[i] != kPoisonBf16) {
      if (touched++ == 0) first = int64_t(i);
    }
  EXPECT_EQ(touched, 0u) << sc.describe() << "\n  padding rows written, first at element " << first;
  std::printf("    [%s] %s\n", c.ok(1e-2) && touched == 0 ? "ok" : "FAIL", c.summary().c_str());
}

// The prefill implementations a scenario runs: the mma.sync kernel on 128-row tiles, the Hopper kernel on
// 128-row (two consumer warpgroups) and 192-row (three) tiles, the latter only with pages of >= 8 tokens;
// and the Hopper kernel with the keys of every tile of two or more 128-key tiles split into up to 3 pieces
// (PlanOptions::prefill_pieces: its full-attention launches write partial results and merge them).
struct PrefillConfig {
  const char* name;
  PrefillVariant variant;
  int rows;
  int pieces = 0;
};
constexpr PrefillConfig kPrefillConfigs[] = {
    {"mma.sync", PrefillVariant::kMmaSync, kPrefillBlockM},
    {"hopper-128", PrefillVariant::kHopper, kPrefillBlockM},
    {"hopper-192", PrefillVariant::kHopper, kPrefillBlockMHopper},
    {"hopper-128-split", PrefillVariant::kHopper, kPrefillBlockM, 3},
    {"hopper-192-split", PrefillVariant::kHopper, kPrefillBlockMHopper, 3}};

// Runs the scenario's step (prefill and decode launches) once per prefill implementation, each with its own
// plan on a freshly poisoned output, and checks each against the reference (computed once).
// ORCHID_TEST_PREFILL=NAME runs only that implementation (mma.sync, hopper-128, hopper-192,
// hopper-128-split, hopper-192-split).
void run_scenario(const Scenario& sc, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const Problem pr = make_problem(sc, rng);
  const char* only = std::getenv("ORCHID_TEST_PREFILL");
  std::vector<std::vector<uint16_t>> outs;
  std::vector<const char*> names;
  DeviceProblem d;
  for (const PrefillConfig& cfg : kPrefillConfigs) {
    if (only != nullptr && std::string(only) != cfg.name) continue;
    if (cfg.variant == PrefillVariant::kHopper && (sc.page_size < 8 || sc.fp8)) continue;
    AttentionPlanBuilder plan;
    plan.build(pr.plan_seqs, pr.num_tokens, [&] {
      PlanOptions o = plan_options(sc);
      o.token_bucket = pr.token_rows;
      o.prefill_rows = cfg.rows;
      o.prefill_pieces = cfg.pieces;
      return o;
    }());
    if (!outs.empty() && plan.sizes().num_prefill_tiles == 0)
      break;  // decode only: the variant does not matter
    upload(pr, plan, d);
    const AttentionPlan view = plan.device_view(d.blob.get());
    if (d.out.size() > 0)
      ORCHID_CUDA_CHECK(cudaMemset(d.out.get(), 0xff, d.out.size() * sizeof(uint16_t)));  // poison
    SinkAttentionArgs args = make_args(pr, d);
    args.prefill_variant = cfg.variant;
    sink_attention(args, view, d.workspace.get(), nullptr);
    ORCHID_CUDA_CHECK(cudaGetLastError());
    ORCHID_CUDA_CHECK(cudaDeviceSynchronize());
    outs.push_back(d.out.download());
    names.push_back(cfg.name);
    // The same step run another way (on a freshly poisoned output) must give these bits.
    auto expect_same_bits = [&](const SinkAttentionArgs& variant, const std::string& what) {
      ORCHID_CUDA_CHECK(cudaMemset(d.out.get(), 0xff, d.out.size() * sizeof(uint16_t)));
      sink_attention(variant, view, d.workspace.get(), nullptr);
      ORCHID_CUDA_CHECK(cudaGetLastError());
      ORCHID_CUDA_CHECK(cudaDeviceSynchronize());
      const std::vector<uint16_t> got = d.out.download();
      size_t differ = 0;
      for (size_t i = 0; i < got.size(); ++i) differ += got[i] != outs.back()[i];
      EXPECT_EQ(differ, 0u) << cfg.name << ", " << what << ": " << sc.describe();
    };
    if (cfg.variant == PrefillVariant::kHopper && view.num_prefill_tiles > 0) {
      // Two persistent CTAs serving every item in turn (ring and Q buffers carried from item to item,
      // items of different lengths): the default grid's bits.
      SinkAttentionArgs few = args;
      few.prefill_ctas = 2;
      expect_same_bits(few, "two persistent prefill CTAs");
      // The window tile's output by tensor stores, and by 16-byte stores: the same staged rows.
      for (const int tma_store : {0, 1}) {
        SinkAttentionArgs store = args;
        store.prefill_tma_store = tma_store;
        expect_same_bits(store, tma_store ? "output by tensor stores" : "output by 16-byte stores");
      }
    }
    if (view.decode_bucket > 0 && !sc.fp8 && outs.size() == 1) {
      for (const int stages : {3, 4}) {  // the BF16 decode kernel's two ring depths
        SinkAttentionArgs depth = args;
        depth.decode_stages = stages;
        expect_same_bits(depth, "a decode ring of " + std::to_string(stages) + " stages");
      }
    }
    std::printf(
        "  %s [%s]: %d prefill tiles (%d split), %d decode slots (<= %d queries) x %d splits (%d with the "
        "window)\n",
        sc.describe().c_str(), cfg.name, view.num_prefill_tiles, view.num_split_tiles, view.decode_bucket,
        view.decode_q, view.decode_splits, view.decode_splits_window);
  }
  EXPECT_FALSE(outs.empty()) << "ORCHID_TEST_PREFILL must name one of kPrefillConfigs";
  const std::vector<double> ref = reference_output(pr);
  for (size_t v = 0; v < outs.size(); ++v) {
    SCOPED_TRACE(std::string("prefill kernel ") + names[v]);
    std::printf("    prefill kernel %s:\n", names[v]);
    check_output(pr, ref, outs[v]);
  }
}

class SinkAttention : public ::testing::Test {
 protected:
  void SetUp() override { ORCHID_REQUIRE_GPU_OR_SKIP(); }
  uint64_t seed_ = orchid::testing::test_seed();
};

#define SEED_TRACE() SCOPED_TRACE("ORCHID_TEST_SEED=" + std::to_string(seed_))

TEST_F(SinkAttention, SmallPrefillGptOssShapes) {
  SEED_TRACE();
  Scenario sc;
  sc.seqs = {{37, 0}, {5, 100}, {0, 10}, {130, 61}, {16, 16}, {2, 0}};
  run_scenario(sc, seed_);
  sc.page_size = 32;
  sc.seqs = {{64, 0}, {17, 3}, {129, 200}};
  run_scenario(sc, seed_ + 1);
}

TEST_F(SinkAttention, SmallPrefillSlidingWindow) {
  SEED_TRACE();
  for (int ps : {8, 16, 32, 64}) {  // 8: the Hopper kernel's window tile in 24 boxes of 8 rows
    Scenario sc;
    sc.page_size = ps;
    sc.window = 128;
    sc.kind = kSlidingTable;
    sc.seqs = {{200, 0}, {3, 300}, {77, 129}, {128, 127}, {9, 1000}};
    run_scenario(sc, seed_ + uint64_t(ps));
  }
}

TEST_F(SinkAttention, SmallPrefillOddWindowsAndNoSinks) {
  SEED_TRACE();
  Scenario sc;
  sc.window = 1;  // only the token itself
  sc.seqs = {{20, 0}, {7, 5}};
  run_scenario(sc, seed_);
  sc.window = 33;
  sc.sinks = false;
  sc.seqs = {{100, 0}, {50, 40}};
  run_scenario(sc, seed_ + 1);
  sc.window = 0;
  sc.seqs = {{65, 0}, {3, 1}};
  run_scenario(sc, seed_ + 2);
}

TEST_F(SinkAttention, PrefillGqaRatios) {
  SEED_TRACE();
  const std::pair<int, int> heads[] = {{8, 8}, {10, 2}, {12, 4}, {48, 2}, {128, 1}, {7, 7}, {96, 1}};
  uint64_t k = 0;
  for (auto [hq, hkv] : heads) {
    for (int window : {0, 128}) {
      Scenario sc;
      sc.hq = hq;
      sc.hkv = hkv;
      sc.window = window;
      sc.kind = window > 0 ? kSlidingTable : kFullTable;
      sc.page_size = window > 0 ? 16 : 64;
      sc.seqs = {{150, 0}, {33, 70}, {1, 9}, {200, 300}};
      run_scenario(sc, seed_ + ++k);
    }
  }
}

TEST_F(SinkAttention, PrefillLongAndChunked) {
  SEED_TRACE();
  Scenario sc;
  sc.seqs = {{1024, 0}, {200, 3000}, {513, 511}};
  run_scenario(sc, seed_);
  sc.window = 128;
  sc.kind = kSlidingTable;
  sc.page_size = 32;
  run_scenario(sc, seed_ + 1);
}

TEST_F(SinkAttention, PrefillLargeLogits) {
  SEED_TRACE();
  // Logits of a few tens (YaRN's concentration^2 scales gpt-oss logits by 1.8): the running max matters.
  Scenario sc;
  sc.q_std = 4.0f;
  sc.k_std = 4.0f;
  sc.seqs = {{300, 0}, {40, 1000}};
  run_scenario(sc, seed_);
}

// The sequences under every split choice (one, automatic, a few, more than there are tiles) and both table
// kinds (full, 128-key window).
void run_split_grid(const std::vector<SeqSpec>& seqs, int max_decode_queries, uint64_t seed,
                    bool fp8 = false) {
  for (int splits : {1, 0, 3, 64}) {
    for (int window : {0, 128}) {
      Scenario sc;
      sc.fp8 = fp8;
      sc.window = window;
      sc.kind = window > 0 ? kSlidingTable : kFullTable;
      sc.decode_splits = splits;
      sc.max_decode_queries = max_decode_queries;
      sc.seqs = seqs;
      run_scenario(sc, ++seed);
    }
  }
}

TEST_F(SinkAttention, SmallDecode) {
  SEED_TRACE();
  run_split_grid({{1, 0}, {1, 1}, {1, 62}, {1, 63}, {1, 64}, {1, 128}, {1, 999}}, 1, seed_);
}

// Long contexts (64-token pages) under automatic, one and 13 splits; with `window_too` a 128-key sliding
// window over the same positions as well.
void run_long_contexts(const std::vector<SeqSpec>& seqs, int max_decode_queries, bool window_too,
                       uint64_t seed, bool fp8 = false) {
  for (int splits : {0, 1, 13}) {
    Scenario sc;
    sc.fp8 = fp8;
    sc.page_size = 64;
    sc.decode_splits = splits;
    sc.max_decode_queries = max_decode_queries;
    sc.seqs = seqs;
    run_scenario(sc, seed + uint64_t(splits));
    if (!window_too) continue;
    sc.window = 128;
    sc.kind = kSlidingTable;
    run_scenario(sc, seed + 100 + uint64_t(splits));
  }
}

TEST_F(SinkAttention, DecodeLongContext) {
  SEED_TRACE();
  run_long_contexts({{1, 20000}, {1, 70001}, {1, 4095}}, 1, false, seed_);
}

TEST_F(SinkAttention, DecodeGqaRatios) {
  SEED_TRACE();
  const std::pair<int, int> heads[] = {{8, 8}, {10, 2}, {16, 1}, {34, 2}, {96, 3}, {64, 1}, {64, 2}};
  uint64_t k = 0;
  for (auto [hq, hkv] : heads) {
    for (int splits : {1, 5}) {
      Scenario sc;
      sc.hq = hq;
      sc.hkv = hkv;
      sc.page_size = 32;
      sc.decode_splits = splits;
      sc.sinks = (k % 3) != 2;
      sc.seqs = {{1, 0}, {1, 700}, {1, 129}};
      run_scenario(sc, seed_ + ++k);
    }
  }
}

// Verify steps: 1 + k query tokens a sequence in one decode CTA, each row masked to its own causal (and
// window) range, around the tile, window and split boundaries.
TEST_F(SinkAttention, SmallVerifyDecode) {
  SEED_TRACE();
  run_split_grid({{2, 0}, {8, 0}, {5, 60}, {3, 62}, {4, 63}, {7, 121}, {6, 126}, {8, 250}, {2, 999}, {1, 5}},
                 8, seed_);
}

TEST_F(SinkAttention, VerifyDecodeGqaRatiosAndOddWindows) {
  SEED_TRACE();
  // (hq, hkv, tokens a sequence): each fills one decode CTA's 64 rows or part of them.
  const int shapes[][3] = {{8, 8, 33}, {10, 2, 12}, {16, 1, 4}, {34, 2, 3}, {64, 2, 2}, {64, 8, 7}};
  uint64_t k = 0;
  for (auto [hq, hkv, n] : shapes) {
    for (int window : {0, 1, 33}) {
      Scenario sc;
      sc.hq = hq;
      sc.hkv = hkv;
      sc.window = window;
      sc.kind = window > 0 ? kSlidingTable : kFullTable;
      sc.page_size = 32;
      sc.decode_splits = (k % 2) == 0 ? 0 : 5;
      sc.sinks = (k % 3) != 2;
      sc.max_decode_queries = 64;
      sc.seqs = {{n, 0}, {n, 700}, {std::max(1, n / 2), 129}};
      run_scenario(sc, seed_ + ++k);
    }
  }
}

TEST_F(SinkAttention, VerifyDecodeLongContext) {
  SEED_TRACE();
  run_long_contexts({{5, 20000}, {2, 70001}, {4, 4095}}, 5, true, seed_);
}

TEST_F(SinkAttention, SmallMixedStepWithPadding) {
  SEED_TRACE();
  Scenario sc;
  sc.seqs = {{1, 40}, {25, 0}, {0, 7}, {1, 300}, {90, 100}, {1, 0}};
  sc.extra_tokens = 5;
  sc.decode_bucket = 6;  // 3 decodes + 3 padding slots
  sc.seq_bucket = 9;
  run_scenario(sc, seed_);
  sc.window = 128;
  sc.kind = kSlidingTable;
  sc.decode_splits = 4;
  run_scenario(sc, seed_ + 1);
  // Verify-sized sequences next to prefill ones (a chunk of 3 is decode-sized too).
  sc.max_decode_queries = 4;
  sc.seqs = {{4, 40}, {25, 0}, {0, 7}, {3, 300}, {90, 100}, {1, 0}, {5, 64}};
  sc.decode_bucket = 5;
  sc.seq_bucket = 9;
  run_scenario(sc, seed_ + 2);
  sc.window = 0;
  sc.kind = kFullTable;
  sc.decode_splits = 0;
  run_scenario(sc, seed_ + 3);
}

TEST_F(SinkAttention, SmallEmptyBatches) {
  SEED_TRACE();
  Scenario sc;
  run_scenario(sc, seed_);  // no sequences at all
  sc.seqs = {{0, 0}, {0, 50}};
  run_scenario(sc, seed_ + 1);  // only zero-length sequences
  sc.extra_tokens = 3;
  sc.decode_bucket = 2;  // only padding slots and tokens
  run_scenario(sc, seed_ + 2);
}

// A decode step captured once in a CUDA graph and replayed after a new plan (other sequences and lengths,
// same buckets) was copied to the same device buffers: the launches read every length on the device.
// `n` query tokens a sequence: 1 for plain decode, 1 + k for a speculative verify step.
void graph_replay(int n, uint64_t seed, bool fp8 = false) {
  Scenario a;
  a.fp8 = fp8;
  a.page_size = 16;
  a.decode_splits = 8;
  a.decode_bucket = 4;
  a.seq_bucket = 4;
  a.max_decode_queries = n;
  a.extra_tokens = n;
  a.seqs = {{n, 5}, {n, 1000}, {n, 77}};
  Scenario b = a;
  b.extra_tokens = 2 * n;
  b.seqs = {{n, 3000}, {n, 0}};
  std::mt19937_64 rng(seed);
  const Problem pa = make_problem(a, rng);
  const Problem pb = make_problem(b, rng);
  auto build = [n](const Problem& pr) {
    AttentionPlanBuilder plan;
    PlanOptions o = plan_options(pr.sc);
    o.token_bucket = 4 * n;
    plan.build(pr.plan_seqs, pr.num_tokens, o);
    return plan;
  };
  const AttentionPlanBuilder plan_a = build(pa), plan_b = build(pb);
  ASSERT_EQ(plan_a.blob_bytes(), plan_b.blob_bytes());
  DeviceProblem d;
  // Capacities for both problems first, so that no buffer moves between capture and replay.
  d.k_pool.resize(std::max(pa.k_pool.size(), pb.k_pool.size()));
  d.v_pool.resize(d.k_pool.size());
  d.k_pool8.resize(std::max(pa.k_pool8.size(), pb.k_pool8.size()));
  d.v_pool8.resize(d.k_pool8.size());
  d.k_scale.resize(std::max(pa.k_scale.size(), pb.k_scale.size()));
  d.v_scale.resize(d.k_scale.size());
  d.table.resize(std::max(pa.table.size(), pb.table.size()));
  d.workspace.resize(std::max(plan_a.decode_workspace_bytes(), plan_b.decode_workspace_bytes()));
  upload(pa, plan_a, d);
  auto args_of = [&](const Problem& pr) { return make_args(pr, d); };

  cudaStream_t stream;
  ORCHID_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  // One eager run first, as a runtime warms up before capturing (one-time host set-up stays out of capture).
  sink_attention_decode(args_of(pa), plan_a.device_view(d.blob.get()), d.workspace.get(), stream);
  ORCHID_CUDA_CHECK(cudaStreamSynchronize(stream));
  ORCHID_CUDA_CHECK(cudaMemset(d.out.get(), 0xff, d.out.size() * sizeof(uint16_t)));  // poison again
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  const AttentionPlan view_a = plan_a.device_view(d.blob.get());
  ORCHID_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  sink_attention_decode(args_of(pa), view_a, d.workspace.get(), stream);
  ORCHID_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  ORCHID_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));

  ORCHID_CUDA_CHECK(cudaGraphLaunch(exec, stream));
  ORCHID_CUDA_CHECK(cudaStreamSynchronize(stream));
  std::printf("  graph replay, plan A: %s\n", a.describe().c_str());
  check_output(pa, reference_output(pa), d.out.download());

  upload(pb, plan_b, d);
  ORCHID_CUDA_CHECK(cudaGraphLaunch(exec, stream));
  ORCHID_CUDA_CHECK(cudaStreamSynchronize(stream));
  std::printf("  graph replay, plan B: %s\n", b.describe().c_str());
  check_output(pb, reference_output(pb), d.out.download());

  ORCHID_CUDA_CHECK(cudaGraphExecDestroy(exec));
  ORCHID_CUDA_CHECK(cudaGraphDestroy(graph));
  ORCHID_CUDA_CHECK(cudaStreamDestroy(stream));
}

TEST_F(SinkAttention, DecodeGraphReplayWithNewPlan) {
  SEED_TRACE();
  graph_replay(1, seed_);
}

TEST_F(SinkAttention, VerifyGraphReplayWithNewPlan) {
  SEED_TRACE();
  graph_replay(4, seed_);
}

// ---- FP8 (e4m3) KV cache: the mma.sync prefill kernel and the decode kernel on e4m3 pages ----

TEST_F(SinkAttention, Fp8KvPrefill) {
  SEED_TRACE();
  Scenario sc;
  sc.fp8 = true;
  sc.seqs = {{37, 0}, {5, 100}, {0, 10}, {130, 61}, {16, 16}, {2, 0}};
  run_scenario(sc, seed_);
  sc.page_size = 32;
  sc.seqs = {{1024, 0}, {200, 3000}, {513, 511}};
  run_scenario(sc, seed_ + 1);
  for (int ps : {16, 64}) {
    sc.page_size = ps;
    sc.window = 128;
    sc.kind = kSlidingTable;
    sc.seqs = {{200, 0}, {3, 300}, {77, 129}, {128, 127}, {9, 1000}};
    run_scenario(sc, seed_ + 2 + uint64_t(ps));
  }
  sc = Scenario{};
  sc.fp8 = true;
  sc.window = 33;
  sc.sinks = false;
  sc.seqs = {{100, 0}, {50, 40}};
  run_scenario(sc, seed_ + 3);
  sc = Scenario{};  // logits of a few tens: the running max matters
  sc.fp8 = true;
  sc.q_std = 4.0f;
  sc.k_std = 4.0f;
  sc.seqs = {{300, 0}, {40, 1000}};
  run_scenario(sc, seed_ + 4);
}

TEST_F(SinkAttention, Fp8KvPrefillGqaRatios) {
  SEED_TRACE();
  const std::pair<int, int> heads[] = {{8, 8}, {10, 2}, {48, 2}, {128, 1}, {7, 7}};
  uint64_t k = 0;
  for (auto [hq, hkv] : heads) {
    Scenario sc;
    sc.fp8 = true;
    sc.hq = hq;
    sc.hkv = hkv;
    sc.page_size = 64;
    sc.seqs = {{150, 0}, {33, 70}, {1, 9}, {200, 300}};
    run_scenario(sc, seed_ + ++k);
  }
}

TEST_F(SinkAttention, Fp8KvDecode) {
  SEED_TRACE();
  run_split_grid({{1, 0}, {1, 1}, {1, 62}, {1, 63}, {1, 64}, {1, 128}, {1, 999}}, 1, seed_, true);
  run_long_contexts({{1, 20000}, {1, 70001}, {1, 4095}}, 1, true, seed_ + 50, true);
}

TEST_F(SinkAttention, Fp8KvVerifyDecode) {
  SEED_TRACE();
  run_split_grid({{2, 0}, {8, 0}, {5, 60}, {7, 121}, {6, 126}, {8, 250}, {1, 5}}, 8, seed_, true);
  const int shapes[][3] = {{8, 8, 33}, {10, 2, 12}, {64, 2, 2}, {64, 8, 7}};
  uint64_t k = 100;
  for (auto [hq, hkv, n] : shapes) {
    Scenario sc;
    sc.fp8 = true;
    sc.hq = hq;
    sc.hkv = hkv;
    sc.page_size = 32;
    sc.decode_splits = (k % 2) == 0 ? 0 : 5;
    sc.max_decode_queries = 64;
    sc.seqs = {{n, 0}, {n, 700}, {std::max(1, n / 2), 129}};
    run_scenario(sc, seed_ + ++k);
  }
}

TEST_F(SinkAttention, Fp8KvMixedStepWithPadding) {
  SEED_TRACE();
  Scenario sc;
  sc.fp8 = true;
  sc.seqs = {{1, 40}, {25, 0}, {0, 7}, {1, 300}, {90, 100}, {1, 0}};
  sc.extra_tokens = 5;
  sc.decode_bucket = 6;
  sc.seq_bucket = 9;
  run_scenario(sc, seed_);
  sc.window = 128;
  sc.kind = kSlidingTable;
  sc.decode_splits = 4;
  run_scenario(sc, seed_ + 1);
}

TEST_F(SinkAttention, Fp8KvDecodeGraphReplayWithNewPlan) {
  SEED_TRACE();
  graph_replay(1, seed_, true);
  graph_replay(4, seed_ + 1, true);
}

TEST_F(SinkAttention, Fp8KvRefusedByTheHopperPrefillKernel) {
  SEED_TRACE();
  Scenario sc;
  sc.fp8 = true;
  sc.seqs = {{40, 0}};
  std::mt19937_64 rng(seed_);
  const Problem pr = make_problem(sc, rng);
  AttentionPlanBuilder plan;
  PlanOptions o = plan_options(sc);
  o.prefill_rows = kPrefillBlockMHopper;
  plan.build(pr.plan_seqs, pr.num_tokens, o);
  DeviceProblem d;
  upload(pr, plan, d);
  SinkAttentionArgs args = make_args(pr, d);
  args.prefill_variant = PrefillVariant::kHopper;
  EXPECT_FALSE(hopper_prefill_supports(args));
  EXPECT_THROW(sink_attention_prefill(args, plan.device_view(d.blob.get()), nullptr, nullptr),
               orchid::InternalError);
}

}  // namespace
}  // namespace orchid::kernels::attention
