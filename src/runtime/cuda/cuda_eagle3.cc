#include "runtime/cuda/cuda_eagle3.h"

#include <algorithm>
#include <cmath>

#include "core/dtypes.h"
#include "core/error.h"
#include "kernels/attention/sink_attention.h"
#include "kernels/common/cuda_check.h"
#include "kernels/common/device_info.h"
#include "kernels/norm/rmsnorm.h"
#include "kernels/ops/ops.h"
#include "model/rope.h"
#include "runtime/cpu/cpu_linear.h"

namespace orchid::runtime::cuda {

namespace e3 = kernels::eagle3;
namespace attn = kernels::attention;

namespace {

// Head rows a pass of the layer takes (a long prompt's catch-up runs in passes, in order, so each pass
// sees the K/V the ones before it wrote).
int64_t chunk_rows_for(const CudaEagle3Sizes& s) {
  return std::max<int64_t>(1024, s.max_step_seqs);
}

struct Shape {
  int64_t H, I, qd, kvd, Vd, T, S, R, K, table;
};
Shape shape_of(const model::Eagle3Config& c, const CudaEagle3Sizes& s) {
  const int64_t K = std::max<int64_t>(1, s.max_proposals);
  const int64_t scratch = (K + s.page_size - 1) / std::max(1, s.page_size) + 1;
  return {
      c.hidden_size,     c.intermediate_size, c.q_dim(),         c.kv_dim(), c.draft_vocab_size,
      s.max_step_tokens, s.max_step_seqs,     chunk_rows_for(s), K,          s.max_pages_per_seq + scratch};
}

attn::PlanOptions plan_options_for(const model::Eagle3Config& c, const CudaEagle3Sizes& s) {
  attn::PlanOptions po;
  po.num_q_heads = int(c.num_heads);
  po.num_kv_heads = int(c.num_kv_heads);
  po.sm_count = kernels::device_info().sm_count;
  po.max_decode_queries = 1 + std::max(1, s.max_proposals);
  return po;
}

// The attention plan's blob for up to z.R rows (and decode slots), its split arrival counts included.
size_t blob_bytes(const model::Eagle3Config& c, const Shape& z) {
  return size_t(12 * z.R + 64 + z.R * int64_t(c.num_kv_heads)) * 4;
}

// Every take of the head's arena, in one place (bytes_needed and the constructor agree by construction).
template <typename Take>
void lay_out(const model::Eagle3Config& c, const CudaEagle3Sizes& s, Take&& take) {
  const Shape z = shape_of(c, s);
  // Weights.
  take(size_t(z.H * 3 * z.H) * 2);                 // fc
  take(size_t((z.qd + 2 * z.kvd) * 2 * z.H) * 2);  // q, k, v
  take(size_t(z.H * z.qd) * 2);                    // o
  take(size_t(2 * z.I * z.H) * 2);                 // gate, up
  take(size_t(z.H * z.I) * 2);                     // down
  take(size_t(z.Vd * z.H) * 2);                    // lm_head
  take(size_t(c.has_embedding ? c.vocab_size * z.H : 0) * 2);
  for (int i = 0; i < 4; ++i) take(size_t(z.H) * 4);  // norms
  take(size_t(z.Vd) * 4);                             // d2t
  // Workspace.
  take(size_t(z.T * 3 * z.H) * 2);                          // aux
  take(size_t((z.T + z.S) * z.H) * 4);                      // g_all
  for (int i = 0; i < 3; ++i) take(size_t(z.R * z.H) * 4);  // g, pre, emb
  take(size_t(2 * z.S * z.H) * 4);                          // the chain's current and next rows
  take(size_t(z.S * z.Vd) * 4);                             // logits
  take(size_t(z.R * z.H) * 2 * 3);                          // e, hn, h
  take(size_t(z.R * 2 * z.H) * 2);                          // x
  take(size_t(z.R * (z.qd + 2 * z.kvd)) * 2);
  take(size_t(z.R * z.qd) * 2 * 2);  // q, attn
  take(size_t(z.R * 2 * z.I) * 2);   // gate | up
  take(size_t(z.R * z.I) * 2);       // act
  take(size_t(z.R) * 4 * 3);         // index, tokens, selection
  take(size_t(z.R) * sizeof(e3::HeadRow));
  take(blob_bytes(c, z));                                                // attention plan
  take(attn::decode_workspace_bound(int(z.R), plan_options_for(c, s)));  // its split states
  take(size_t(z.S * z.table) * 4);                                       // chain page tables
  take(size_t(z.S) * 4 * 2);                                             // ids, logprobs
  take(size_t(z.S * z.K) * 4);                                           // proposals
}

std::vector<uint16_t> host_bf16(const io::TensorView& t) {
  const std::vector<float> f = cpu::to_f32(t);
  std::vector<uint16_t> out(f.size());
  for (size_t i = 0; i < f.size(); ++i) out[i] = float_to_bf16(f[i]);
  return out;
}

}  // namespace

void CudaEagle3Head::check_supported(const model::Eagle3Config& c) {
  if (c.head_dim != e3::kHeadDim)
    fail("EAGLE-3 head: the CUDA backend takes heads of width {}, this one has {}", e3::kHeadDim, c.head_dim);
  if (c.num_kv_heads <= 0 || c.num_heads % c.num_kv_heads != 0 || c.num_heads / c.num_kv_heads > 64)
    fail("EAGLE-3 head: {} query heads over {} KV heads (the CUDA backend takes groups of up to 64)",
         c.num_heads, c.num_kv_heads);
  if (c.norm_before_fc)
    fail("EAGLE-3 head: input_norm before fc (norm_before_fc) runs on the CPU backend only so far");
  if (c.hidden_size % 8 != 0 || c.intermediate_size % 8 != 0)
    fail("EAGLE-3 head: hidden ({}) and intermediate ({}) sizes must be multiples of 8 on the CUDA backend",
         c.hidden_size, c.intermediate_size);
}

size_t CudaEagle3Head::bytes_needed(const model::Eagle3Config& c, const CudaEagle3Sizes& sizes) {
  size_t total = 0;
  lay_out(c, sizes, [&](size_t bytes) { total += arena_bytes(bytes); });
  return total;
}

size_t CudaEagle3Head::page_bytes(const model::Eagle3Config& c, int32_t page_size) {
  return size_t(2) * size_t(c.kv_dim()) * size_t(page_size) * 2;
}

CudaEagle3Head::CudaEagle3Head(model::Eagle3Head head, const __nv_bfloat16* target_embedding,
                               const CudaEagle3Sizes& sizes, cudaStream_t stream)
    : head_(std::move(head)), sizes_(sizes), stream_(stream), chunk_rows_(chunk_rows_for(sizes)) {
  const auto& c = head_.config;
  check_supported(c);
  arena_ = DeviceArena(bytes_needed(c, sizes), "EAGLE-3 head");
  std::vector<uint8_t*> slices;
  lay_out(c, sizes, [&](size_t bytes) { slices.push_back(bytes ? arena_.take_bytes(bytes) : nullptr); });
  size_t at = 0;
  auto next = [&]() { return slices[at++]; };
  const auto& ck = head_.checkpoint;
  const auto& n = head_.names;
  auto put = [&](void* dst, const void* src, size_t bytes) {
    ORCHID_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
  };
  // Matrices stacked by rows into one BF16 weight (the fused q/k/v and gate/up GEMMs).
  auto upload_rows = [&](std::initializer_list<const std::string*> names) {
    uint8_t* dst = next();
    size_t off = 0;
    for (const std::string* name : names) {
      const std::vector<uint16_t> v = host_bf16(ck.get(*name));
      put(dst + off, v.data(), v.size() * 2);
      off += v.size() * 2;
    }
    return reinterpret_cast<__nv_bfloat16*>(dst);
  };
  auto upload_f32 = [&](const std::string& name) {
    const std::vector<float> v = cpu::to_f32(ck.get(name));
    ORCHID_CHECK(int64_t(v.size()) == c.hidden_size, "EAGLE-3 head: {} has {} values", name, v.size());
    float* dst = reinterpret_cast<float*>(next());
    put(dst, v.data(), v.size() * 4);
    return dst;
  };
  fc_ = upload_rows({&n.fc});
  qkv_w_ = upload_rows({&n.q, &n.k, &n.v});
  o_w_ = upload_rows({&n.o});
  gate_up_w_ = upload_rows({&n.gate, &n.up});
  down_w_ = upload_rows({&n.down});
  lm_head_ = upload_rows({&n.lm_head});
  if (c.has_embedding) {
    embedding_ = upload_rows({&n.embedding});
  } else {
    next();
    embedding_ = target_embedding;
  }
  input_norm_ = upload_f32(n.input_layernorm);
  hidden_norm_ = upload_f32(n.hidden_norm);
  post_norm_ = upload_f32(n.post_norm);
  final_norm_ = upload_f32(n.final_norm);
  d2t_ = reinterpret_cast<int32_t*>(next());
  std::vector<int32_t> d2t(head_.draft_to_target.begin(), head_.draft_to_target.end());
  put(d2t_, d2t.data(), d2t.size() * 4);

  const Shape z = shape_of(c, sizes);
  aux_ = reinterpret_cast<__nv_bfloat16*>(next());
  g_all_ = reinterpret_cast<float*>(next());
  g_ = reinterpret_cast<float*>(next());
  pre_ = reinterpret_cast<float*>(next());
  emb_ = reinterpret_cast<float*>(next());
  cur_ = reinterpret_cast<float*>(next());
  nxt_ = cur_ + z.S * z.H;
  logits_ = reinterpret_cast<float*>(next());
  e_ = reinterpret_cast<__nv_bfloat16*>(next());
  hn_ = e_ + z.R * z.H;
  h_ = hn_ + z.R * z.H;
  x_ = reinterpret_cast<__nv_bfloat16*>(next());
  qkv_ = reinterpret_cast<__nv_bfloat16*>(next());
  q_ = reinterpret_cast<__nv_bfloat16*>(next());
  attn_ = q_ + z.R * z.qd;
  gu_ = reinterpret_cast<__nv_bfloat16*>(next());
  act_ = reinterpret_cast<__nv_bfloat16*>(next());
  d_index_ = reinterpret_cast<int32_t*>(next());
  d_tokens_ = d_index_ + z.R;
  d_sel_ = d_tokens_ + z.R;
  d_rows_ = reinterpret_cast<e3::HeadRow*>(next());
  plan_options_ = plan_options_for(c, sizes);
  blob_cap_ = blob_bytes(c, z);
  d_blob_ = next();
  decode_ws_bytes_ = attn::decode_workspace_bound(int(z.R), plan_options_);
  decode_ws_ = next();
  d_chain_table_ = reinterpret_cast<int32_t*>(next());
  d_ids_ = reinterpret_cast<int32_t*>(next());
  d_logprobs_ = reinterpret_cast<float*>(d_ids_ + z.S);
  d_props_ = reinterpret_cast<int32_t*>(next());
  ORCHID_CHECK(at == slices.size(), "EAGLE-3 head: {} of {} slices used", at, slices.size());

  const model::RopeTables rope = model::rope_tables(c.rope, c.head_dim);
  for (int j = 0; j < e3::kHeadDim / 2; ++j) freqs_.inv_freq[j] = rope.inv_freq[size_t(j)];
  freqs_.concentration = rope.concentration;
}

int32_t CudaEagle3Head::scratch_pages_per_seq() const {
  const int32_t K = std::max(1, sizes_.max_proposals);
  return (K + sizes_.page_size - 1) / sizes_.page_size + 1;
}

size_t CudaEagle3Head::device_bytes() const {
  return arena_.capacity() + size_t(sizes_.max_step_seqs) * size_t(scratch_pages_per_seq()) *
                                 page_bytes(head_.config, sizes_.page_size);
}

void CudaEagle3Head::allocate_kv(int32_t num_full_pages) {
  num_pages_ = num_full_pages;
  const int64_t pages = int64_t(num_full_pages) + sizes_.max_step_seqs * scratch_pages_per_seq();
  kv_ = DeviceBuffer(size_t(pages) * page_bytes(head_.config, sizes_.page_size), "EAGLE-3 head K/V");
}

void CudaEagle3Head::layer(std::span<const e3::HeadRow> rows, const float* g, const int32_t* tokens,
                           const int32_t* table, float* pre, kernels::DenseGemm& gemm) {
  const auto& c = head_.config;
  const int64_t n = int64_t(rows.size()), H = c.hidden_size, I = c.intermediate_size;
  const float eps = float(c.rms_norm_eps);
  const int32_t total_pages = num_pages_ + int32_t(sizes_.max_step_seqs) * scratch_pages_per_seq();
  const size_t half = size_t(total_pages) * page_bytes(c, sizes_.page_size) / 2;
  e3::HeadKv kv;
  kv.k_pool = reinterpret_cast<__nv_bfloat16*>(kv_.data());
  kv.v_pool = reinterpret_cast<__nv_bfloat16*>(kv_.data() + half);
  kv.page_table = table;
  kv.page_size = sizes_.page_size;
  kv.num_pages = total_pages;
  kv.num_q_heads = int32_t(c.num_heads);
  kv.num_kv_heads = int32_t(c.num_kv_heads);
  // The attention plan: one record per run of a sequence's consecutive positions.
  std::vector<attn::PlanSequence> ps;
  for (int64_t i = 0; i < n; ++i) {
    const e3::HeadRow& r = rows[size_t(i)];
    if (!ps.empty() && ps.back().full_table_begin == r.table_begin &&
        ps.back().start_pos + ps.back().num_q == r.pos) {
      ++ps.back().num_q;
      continue;
    }
    attn::PlanSequence q;
    q.q_start = int32_t(i);
    q.num_q = 1;
    q.start_pos = r.pos;
    q.full_table_begin = r.table_begin;
    ps.push_back(q);
  }
  plan_.build(ps, int32_t(n), plan_options_);
  if (plan_.blob_bytes() > blob_cap_ || plan_.decode_workspace_bytes() > decode_ws_bytes_)
    fail("EAGLE-3 head: an attention plan of {} bytes and {} of workspace for {} rows ({} and {} planned)",
         plan_.blob_bytes(), plan_.decode_workspace_bytes(), n, blob_cap_, decode_ws_bytes_);
  ORCHID_CUDA_CHECK(
      cudaMemcpyAsync(d_blob_, plan_.blob().data(), plan_.blob_bytes(), cudaMemcpyHostToDevice, stream_));
  ORCHID_CUDA_CHECK(cudaMemcpyAsync(d_rows_, rows.data(), rows.size() * sizeof(e3::HeadRow),
                                    cudaMemcpyHostToDevice, stream_));
  const attn::AttentionPlan plan = plan_.device_view(d_blob_);

  // x = [RMSNorm(embed(token)), RMSNorm(g)]
  kernels::ops::embedding_gather(embedding_, tokens, emb_, n, H, stream_);
  kernels::norm::rmsnorm_residual(emb_, nullptr, input_norm_, e_, n, H, eps, stream_);
  kernels::norm::rmsnorm_residual(const_cast<float*>(g), nullptr, hidden_norm_, hn_, n, H, eps, stream_);
  ORCHID_CUDA_CHECK(cudaMemcpy2DAsync(x_, size_t(2 * H) * 2, e_, size_t(H) * 2, size_t(H) * 2, size_t(n),
                                      cudaMemcpyDeviceToDevice, stream_));
  ORCHID_CUDA_CHECK(cudaMemcpy2DAsync(x_ + H, size_t(2 * H) * 2, hn_, size_t(H) * 2, size_t(H) * 2, size_t(n),
                                      cudaMemcpyDeviceToDevice, stream_));
  kernels::DenseGemmArgs a;
  a.m = int(n);
  a.n = int(c.q_dim() + 2 * c.kv_dim());
  a.k = int(2 * H);
  a.x = x_;
  a.w = qkv_w_;
  a.y = qkv_;
  gemm.run(a, stream_);
  e3::rope_kv_write(qkv_, d_rows_, n, freqs_, kv, q_, stream_);
  attn::SinkAttentionArgs sa;
  sa.q = q_;
  sa.k_pool = kv.k_pool;
  sa.v_pool = kv.v_pool;
  sa.page_table = table;
  sa.table_kind = attn::kFullTable;
  sa.page_size = sizes_.page_size;
  sa.sinks = nullptr;
  sa.window = 0;
  sa.softmax_scale = float(1.0 / std::sqrt(double(c.head_dim)));
  sa.out = attn_;
  attn::sink_attention(sa, plan, decode_ws_, stream_);
  // r = attn o_proj^T + residual (g, or its norm), accumulated in fp32.
  if (c.norm_before_residual)
    kernels::ops::bf16_to_f32(hn_, pre, n * H, stream_);
  else
    ORCHID_CUDA_CHECK(cudaMemcpyAsync(pre, g, size_t(n * H) * 4, cudaMemcpyDeviceToDevice, stream_));
  a = {};
  a.m = int(n);
  a.n = int(H);
  a.k = int(c.q_dim());
  a.x = attn_;
  a.w = o_w_;
  a.y = pre;
  a.out = kernels::GemmOut::kF32;
  a.accumulate = true;
  gemm.run(a, stream_);
  // pre = r + down(silu(gate(RMSNorm(r))) * up(RMSNorm(r)))
  kernels::norm::rmsnorm_residual(pre, nullptr, post_norm_, h_, n, H, eps, stream_);
  a = {};
  a.m = int(n);
  a.n = int(2 * I);
  a.k = int(H);
  a.x = h_;
  a.w = gate_up_w_;
  a.y = gu_;
  gemm.run(a, stream_);
  e3::silu_mul(gu_, n, I, act_, stream_);
  a = {};
  a.m = int(n);
  a.n = int(H);
  a.k = int(I);
  a.x = act_;
  a.w = down_w_;
  a.y = pre;
  a.out = kernels::GemmOut::kF32;
  a.accumulate = true;
  gemm.run(a, stream_);
}

void CudaEagle3Head::run(const StepBatch& b, const int32_t* d_full_table, kernels::DenseGemm& gemm,
                         StepOutput& out) {
  const auto& c = head_.config;
  const int64_t H = c.hidden_size, T = b.num_tokens();
  // The rows to catch up on, in order: (source row of g_all_, its next token, its position).
  std::vector<Eagle3SeqRows> plan = pending_.plan(b, out);
  std::vector<int32_t> src, next;
  std::vector<e3::HeadRow> rows;
  std::vector<std::vector<float>> pending_in;  // g rows uploaded after the step's T rows
  struct Proposer {
    size_t seq = 0;     // index in b.seqs
    int64_t row = 0;    // its last head row
    int32_t pos = 0;    // that row's position
    int32_t count = 0;  // drafts it gets
  };
  std::vector<Proposer> proposers;
  std::vector<size_t> keeping;  // plan entries whose kept row waits for the next chunk
  for (size_t p = 0; p < plan.size(); ++p) {
    Eagle3SeqRows& r = plan[p];
    const StepSequence& s = b.seqs[r.seq];
    int32_t k = 0;
    if (r.pending_g) {
      src.push_back(int32_t(T + int64_t(pending_in.size())));
      pending_in.push_back(std::move(*r.pending_g));
      next.push_back(r.next[size_t(k)]);
      rows.push_back({r.first_pos + k++, s.full_table_begin});
    }
    for (int32_t i = 0; i < r.step_rows; ++i) {
      src.push_back(r.step_row_begin + i);
      next.push_back(r.next[size_t(k)]);
      rows.push_back({r.first_pos + k++, s.full_table_begin});
    }
    if (r.keep_row >= 0) keeping.push_back(p);
    const int32_t count = int32_t(std::min<int64_t>(
        {r.propose, sizes_.max_proposals, c.max_position_embeddings - int64_t(r.last_pos())}));
    if (count > 0) proposers.push_back({r.seq, int64_t(rows.size()) - 1, r.last_pos(), count});
  }
  ORCHID_CHECK(int64_t(pending_in.size()) <= sizes_.max_step_seqs, "{} pending head rows", pending_in.size());

  // g_all_ = fc(aux) for the step's rows, then the pending rows.
  if (!rows.empty() || !keeping.empty()) {
    kernels::DenseGemmArgs a;
    a.m = int(T);
    a.n = int(H);
    a.k = int(3 * H);
    a.x = aux_;
    a.w = fc_;
    a.y = g_all_;
    a.out = kernels::GemmOut::kF32;
    gemm.run(a, stream_);
  }
  for (size_t p = 0; p < pending_in.size(); ++p)
    ORCHID_CUDA_CHECK(cudaMemcpyAsync(g_all_ + (T + int64_t(p)) * H, pending_in[p].data(), size_t(H) * 4,
                                      cudaMemcpyHostToDevice, stream_));

  // Catch up, in passes of chunk_rows_; each proposer's last row is kept in cur_ (in proposer order).
  const int64_t n = int64_t(rows.size());
  size_t next_proposer = 0;
  for (int64_t r0 = 0; r0 < n; r0 += chunk_rows_) {
    const int64_t m = std::min(chunk_rows_, n - r0);
    ORCHID_CUDA_CHECK(
        cudaMemcpyAsync(d_index_, src.data() + r0, size_t(m) * 4, cudaMemcpyHostToDevice, stream_));
    ORCHID_CUDA_CHECK(
        cudaMemcpyAsync(d_tokens_, next.data() + r0, size_t(m) * 4, cudaMemcpyHostToDevice, stream_));
    kernels::ops::gather_rows_f32(g_all_, d_index_, g_, m, H, stream_);
    layer(std::span<const e3::HeadRow>(rows.data() + r0, size_t(m)), g_, d_tokens_, d_full_table, pre_, gemm);
    std::vector<int32_t> sel;
    const size_t first = next_proposer;
    while (next_proposer < proposers.size() && proposers[next_proposer].row < r0 + m)
      sel.push_back(int32_t(proposers[next_proposer++].row - r0));
    if (!sel.empty()) {
      ORCHID_CUDA_CHECK(cudaMemcpyAsync(d_sel_, sel.data(), sel.size() * 4, cudaMemcpyHostToDevice, stream_));
      kernels::ops::gather_rows_f32(pre_, d_sel_, cur_ + int64_t(first) * H, int64_t(sel.size()), H, stream_);
    }
  }

  // The draft chain: draft j from cur_, then (j + 1 < k) the layer one position on, fed the draft.
  const int64_t P = int64_t(proposers.size());
  int32_t k = 0;
  for (const auto& p : proposers) k = std::max(k, p.count);
  float *cur = cur_, *nxt = nxt_;
  // Chain page tables: the sequence's pages, then scratch pages of its own for what lies past them.
  const int64_t W = sizes_.max_pages_per_seq + scratch_pages_per_seq();
  if (k > 1) {
    std::vector<int32_t> tables(size_t(P * W), kNoPage);
    for (int64_t p = 0; p < P; ++p) {
      const StepSequence& s = b.seqs[proposers[size_t(p)].seq];
      ORCHID_CHECK(s.num_full_pages <= sizes_.max_pages_per_seq, "{} pages in a sequence's table",
                   s.num_full_pages);
      int32_t* t = tables.data() + p * W;
      std::copy_n(b.full_page_table.data() + s.full_table_begin, s.num_full_pages, t);
      for (int32_t i = 0; i < scratch_pages_per_seq(); ++i)
        t[s.num_full_pages + i] = num_pages_ + int32_t(p) * scratch_pages_per_seq() + i;
    }
    ORCHID_CUDA_CHECK(
        cudaMemcpyAsync(d_chain_table_, tables.data(), tables.size() * 4, cudaMemcpyHostToDevice, stream_));
  }
  std::vector<e3::HeadRow> chain(static_cast<size_t>(P));
  for (int32_t j = 0; j < k; ++j) {
    kernels::norm::rmsnorm_residual(cur, nullptr, final_norm_, h_, P, H, float(c.rms_norm_eps), stream_);
    kernels::DenseGemmArgs a;
    a.m = int(P);
    a.n = int(c.draft_vocab_size);
    a.k = int(H);
    a.x = h_;
    a.w = lm_head_;
    a.y = logits_;
    a.out = kernels::GemmOut::kF32;
    gemm.run(a, stream_);
    kernels::ops::greedy_pick(logits_, P, c.draft_vocab_size, d_ids_, d_logprobs_, stream_);
    e3::map_draft_ids(d_ids_, d2t_, P, d_tokens_, d_props_, k, j, stream_);
    if (j + 1 == k) break;
    for (int64_t p = 0; p < P; ++p) chain[size_t(p)] = {proposers[size_t(p)].pos + j + 1, int32_t(p * W)};
    layer(chain, cur, d_tokens_, d_chain_table_, nxt, gemm);
    std::swap(cur, nxt);
  }

  std::vector<int32_t> props(size_t(P * k));
  if (!props.empty())
    ORCHID_CUDA_CHECK(
        cudaMemcpyAsync(props.data(), d_props_, props.size() * 4, cudaMemcpyDeviceToHost, stream_));
  std::vector<std::vector<float>> kept(keeping.size(), std::vector<float>(size_t(H)));
  for (size_t p = 0; p < keeping.size(); ++p)
    ORCHID_CUDA_CHECK(cudaMemcpyAsync(kept[p].data(), g_all_ + int64_t(plan[keeping[p]].keep_row) * H,
                                      size_t(H) * 4, cudaMemcpyDeviceToHost, stream_));
  ORCHID_CUDA_CHECK(cudaStreamSynchronize(stream_));
  for (size_t p = 0; p < keeping.size(); ++p) pending_.keep(b, plan[keeping[p]], std::move(kept[p]));
  size_t next_p = 0;
  for (size_t i = 0; i < b.seqs.size(); ++i) {
    const StepSequence& s = b.seqs[i];
    if (!s.sample) continue;
    int32_t count = 0;
    if (next_p < proposers.size() && proposers[next_p].seq == i) {
      count = proposers[next_p].count;
      out.proposals.insert(out.proposals.end(), props.begin() + int64_t(next_p) * k,
                           props.begin() + int64_t(next_p) * k + count);
      ++next_p;
    }
    out.num_proposals.push_back(count);
  }
}

}  // namespace orchid::runtime::cuda
