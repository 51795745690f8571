// A step's sequences and page tables for the kernels that write or read the paged KV cache in tests: tokens
// back to back; pages only for the positions of new tokens (older entries are kNoPage: never read), their
// ids shuffled so that page order differs from position order; optionally the first page holding new tokens
// marked kNoPage (its tokens' K/V must be skipped).
#pragma once

#include <algorithm>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

#include "kernels/attention/attention_plan.h"
#include "kernels/attention/kv_layout.h"

namespace orchid::kernels::attention {

struct PagedStep {
  std::vector<PlanSequence> seqs;
  std::vector<int32_t> table;  // never empty (a lone kNoPage when no sequence has pages)
  int num_pages = 0, num_tokens = 0;
};

// seqs: (new tokens, position of the first) per sequence; one table of `kind`.
inline PagedStep make_paged_step(const std::vector<std::pair<int, int>>& seqs, int page_size, TableKind kind,
                                 bool drop_a_page, std::mt19937_64& rng) {
  PagedStep st;
  const int ps = page_size;
  int next_page = 0;
  for (auto [num_q, start] : seqs) {
    PlanSequence s;
    s.q_start = st.num_tokens;
    s.num_q = num_q;
    s.start_pos = start;
    st.num_tokens += num_q;
    const int first_page = start / ps, end_page = (start + num_q + ps - 1) / ps;
    const int32_t row = int32_t(st.table.size());
    for (int pg = 0; pg < end_page; ++pg) st.table.push_back(pg >= first_page ? next_page++ : kNoPage);
    s.full_table_begin = kind == kFullTable ? row : 0;
    s.sliding_table_begin = kind == kSlidingTable ? row : 0;
    st.seqs.push_back(s);
  }
  if (drop_a_page) {
    for (auto& id : st.table)
      if (id >= 0) {
        id = kNoPage;
        break;
      }
  }
  if (st.table.empty()) st.table.push_back(kNoPage);
  st.num_pages = std::max(next_page, 1);
  std::vector<int32_t> perm(static_cast<size_t>(st.num_pages));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  for (auto& id : st.table)
    if (id >= 0) id = perm[size_t(id)];
  return st;
}

// The step's plan for hq / hkv heads, `token_rows` token rows (>= num_tokens: the rest are padding).
inline AttentionPlanBuilder plan_step(const PagedStep& step, int hq, int hkv, int token_rows) {
  AttentionPlanBuilder plan;
  PlanOptions o;
  o.num_q_heads = hq;
  o.num_kv_heads = hkv;
  o.token_bucket = token_rows;
  plan.build(step.seqs, step.num_tokens, o);
  return plan;
}

}  // namespace orchid::kernels::attention
