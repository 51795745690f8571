#include "kernels/attention/attention_plan.h"

#include <algorithm>

#include "core/error.h"
#include "kernels/attention/kv_layout.h"

namespace orchid::kernels::attention {

size_t decode_workspace_bytes(int decode_bucket, int decode_q, int num_q_heads, int decode_splits) {
  if (decode_splits <= 1) return 0;
  const size_t rows = size_t(decode_bucket) * size_t(decode_q) * size_t(num_q_heads) * size_t(decode_splits);
  return rows * (kHeadDim + 1) * sizeof(float);
}

namespace {

int32_t ceil_div(int64_t a, int64_t b) {
  return int32_t((a + b - 1) / b);
}

// Most query tokens a decode slot may take (0 when a group alone is more rows than a decode CTA has).
int max_decode_q(const PlanOptions& o) {
  const int group = std::max(1, o.num_q_heads / std::max(1, o.num_kv_heads));
  return std::max(0, std::min(o.max_decode_queries, kMaxDecodeRows / group));
}

}  // namespace

int decode_splits_for(int bucket, const PlanOptions& o) {
  const int ctas = std::max(1, bucket) * std::max(1, o.num_kv_heads);
  return std::clamp(ceil_div(2 * int64_t(o.sm_count), ctas), 1, std::max(1, o.max_decode_splits));
}

int window_splits_for(int splits, int decode_q, const PlanOptions& o) {
  if (o.window <= 0) return splits;
  const int tiles = ceil_div(int64_t(o.window) + decode_q - 1, 64) + 1;  // + 1: the range need not align
  return std::clamp(tiles / 2, 1, std::max(1, splits));
}

size_t decode_workspace_bound(int max_slots, const PlanOptions& o) {
  size_t most = 0;
  for (int b = 1; b <= max_slots; ++b)
    most = std::max(most, decode_workspace_bytes(b, max_decode_q(o), o.num_q_heads, decode_splits_for(b, o)));
  return most;
}

void AttentionPlanBuilder::build(const std::vector<PlanSequence>& seqs, int32_t num_tokens,
                                 const PlanOptions& o) {
  if (o.num_q_heads <= 0 || o.num_kv_heads <= 0 || o.num_q_heads % o.num_kv_heads != 0)
    fail("attention plan: num_q_heads ({}) must be a positive multiple of num_kv_heads ({})", o.num_q_heads,
         o.num_kv_heads);
  const int group = o.num_q_heads / o.num_kv_heads;
  if (o.prefill_rows != kPrefillBlockM && o.prefill_rows != kPrefillBlockMHopper)
    fail("attention plan: prefill_rows must be {} or {}, not {}", kPrefillBlockM, kPrefillBlockMHopper,
         o.prefill_rows);
  if (group > kPrefillBlockM)
    fail("attention plan: {} query heads per KV head is more than the {} rows of a prefill tile", group,
         kPrefillBlockM);
  if (num_tokens < 0) fail("attention plan: negative token count {}", num_tokens);
  const int32_t token_rows = o.token_bucket > 0 ? o.token_bucket : num_tokens;
  if (token_rows < num_tokens)
    fail("attention plan: token_bucket {} is smaller than the step's {} tokens", token_rows, num_tokens);

  std::vector<int32_t> token_seq(size_t(token_rows), -1);
  std::vector<int32_t> token_pos(size_t(token_rows), 0);
  std::vector<int32_t> decodes;
  struct TileWork {
    PrefillTile tile;
    int32_t last_pos;
  };
  std::vector<TileWork> tiles;
  const int tokens_per_tile = o.prefill_rows / group;
  const int decode_q_limit = max_decode_q(o);
  int32_t max_decode_ctx = 0, decode_q = 1;

  for (size_t i = 0; i < seqs.size(); ++i) {
    const PlanSequence& s = seqs[i];
    if (s.num_q < 0 || s.start_pos < 0 || s.q_start < 0 || int64_t(s.q_start) + s.num_q > num_tokens)
      fail("attention plan: sequence {} has tokens [{}, {}) at position {}, outside the step's {} tokens", i,
           s.q_start, int64_t(s.q_start) + s.num_q, s.start_pos, num_tokens);
    if (s.full_table_begin < 0 || s.sliding_table_begin < 0)
      fail("attention plan: sequence {} has a negative page-table offset", i);
    for (int32_t t = 0; t < s.num_q; ++t) {
      int32_t& owner = token_seq[size_t(s.q_start + t)];
      if (owner != -1)
        fail("attention plan: token {} belongs to sequences {} and {}", s.q_start + t, owner, i);
      owner = int32_t(i);
      token_pos[size_t(s.q_start + t)] = s.start_pos + t;
    }
    if (s.num_q >= 1 && s.num_q <= decode_q_limit) {
      decodes.push_back(int32_t(i));
      max_decode_ctx = std::max(max_decode_ctx, s.start_pos + s.num_q);
      decode_q = std::max(decode_q, s.num_q);
    } else if (s.num_q >= 1) {
      for (int32_t q0 = 0; q0 < s.num_q; q0 += tokens_per_tile) {
        const int32_t last = s.start_pos + std::min(s.num_q, q0 + tokens_per_tile) - 1;
        tiles.push_back({{int32_t(i), q0}, last});
      }
    }
  }
  // Heaviest tiles (most keys under a causal mask) first, so the tail of the grid is short work.
  std::stable_sort(tiles.begin(), tiles.end(),
                   [](const TileWork& a, const TileWork& b) { return a.last_pos > b.last_pos; });

  const int32_t bucket = o.decode_bucket > 0 ? o.decode_bucket : int32_t(decodes.size());
  if (bucket < int32_t(decodes.size()))
    fail("attention plan: decode_bucket {} is smaller than the step's {} decodes", bucket, decodes.size());
  int splits = o.decode_splits;
  if (splits <= 0) {
    splits = 1;
    if (bucket > 0)  // enough CTAs for two per multiprocessor, but no split shorter than two 64-key tiles
      splits = std::max(1, std::min(decode_splits_for(bucket, o), ceil_div(max_decode_ctx, 64) / 2));
  }

  const int32_t seq_records = o.seq_bucket > 0 ? o.seq_bucket : int32_t(seqs.size());
  if (seq_records < int32_t(seqs.size()))
    fail("attention plan: seq_bucket {} is smaller than the step's {} sequences", seq_records, seqs.size());

  sizes_ = AttentionPlan{};
  sizes_.num_seqs = seq_records;
  sizes_.num_tokens = token_rows;
  sizes_.num_prefill_tiles = int32_t(tiles.size());
  sizes_.prefill_tokens_per_tile = tokens_per_tile;
  sizes_.decode_bucket = bucket;
  sizes_.decode_q = decode_q;
  sizes_.decode_splits = splits;
  sizes_.decode_splits_window = o.decode_splits_window > 0 ? std::min(o.decode_splits_window, splits)
                                : o.decode_splits > 0      ? splits
                                                           : window_splits_for(splits, decode_q, o);
  sizes_.num_q_heads = o.num_q_heads;
  sizes_.num_kv_heads = o.num_kv_heads;

  static_assert(sizeof(AttnSeq) == 5 * sizeof(int32_t) && sizeof(PrefillTile) == 2 * sizeof(int32_t));
  blob_.clear();
  seqs_off_ = blob_.size();
  for (const PlanSequence& s : seqs)
    blob_.insert(blob_.end(), {s.q_start, s.num_q, s.start_pos, s.full_table_begin, s.sliding_table_begin});
  blob_.resize(seqs_off_ + size_t(seq_records) * 5, 0);  // padding records: no tokens
  token_seq_off_ = blob_.size();
  blob_.insert(blob_.end(), token_seq.begin(), token_seq.end());
  token_pos_off_ = blob_.size();
  blob_.insert(blob_.end(), token_pos.begin(), token_pos.end());
  tiles_off_ = blob_.size();
  for (const TileWork& t : tiles) blob_.insert(blob_.end(), {t.tile.seq, t.tile.q0});
  decode_off_ = blob_.size();
  blob_.insert(blob_.end(), decodes.begin(), decodes.end());
  blob_.resize(decode_off_ + size_t(bucket), -1);
  if (blob_.empty()) blob_.push_back(0);  // keep a valid (unused) device address
}

AttentionPlan AttentionPlanBuilder::device_view(const void* device_blob) const {
  const int32_t* base = static_cast<const int32_t*>(device_blob);
  AttentionPlan p = sizes_;
  p.seqs = reinterpret_cast<const AttnSeq*>(base + seqs_off_);
  p.token_seq = base + token_seq_off_;
  p.token_pos = base + token_pos_off_;
  p.prefill_tiles = reinterpret_cast<const PrefillTile*>(base + tiles_off_);
  p.decode_seqs = base + decode_off_;
  return p;
}

size_t AttentionPlanBuilder::decode_workspace_bytes() const {
  return attention::decode_workspace_bytes(sizes_.decode_bucket, sizes_.decode_q, sizes_.num_q_heads,
                                           sizes_.decode_splits);
}

}  // namespace orchid::kernels::attention
