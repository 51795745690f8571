#include "kernels/attention/attention_plan.h"

#include <algorithm>
#include <cstdlib>
#include <string_view>

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

// The Hopper kernel's keys a tile under full attention, and the cost model of its persistent grid in those
// tiles: an item or a piece also pays kItemCost for its start (Q, the ring's fill) and its end (the
// epilogue, or a partial result and its share of the merge).
constexpr int kPrefillKeyTile = 128;
static_assert(kHeadDim == 64, "prefill_partial_floats assumes 64 dims a head");
constexpr int64_t kItemCost = 2;
// A split must shorten the longest CTA's work by this much (and by 3%) to be worth its merge launch.
constexpr int64_t kMinSplitGain = 8;

int32_t key_tiles(int32_t last_pos) {
  return last_pos / kPrefillKeyTile + 1;
}

// Key tiles of piece q of `pieces` of a tile of n (the kernel's split: tiles [q n / pieces, (q + 1) n /
// pieces) from the top).
int64_t piece_tiles(int32_t n, int q, int pieces) {
  return int64_t(q + 1) * n / pieces - int64_t(q) * n / pieces;
}

// The persistent grid's rounds (prefill_attention_sm90.cu, round_item): item j goes to CTA j % grid in even
// rounds and grid - 1 - j % grid in odd ones.
void add_item(std::vector<int64_t>& loads, int64_t j, int64_t cost) {
  const int64_t grid = int64_t(loads.size()), r = j / grid, b = j % grid;
  loads[size_t((r & 1) ? grid - 1 - b : b)] += cost;
}

// Pieces of each tile (heaviest first, n[i] key tiles each) for PlanOptions::balance_prefill /
// prefill_pieces: all 1 when no split is worth it.
std::vector<int> choose_pieces(const std::vector<int32_t>& n, const PlanOptions& o) {
  const int64_t tiles = int64_t(n.size()), hkv = o.num_kv_heads, sm = std::max(1, o.sm_count);
  std::vector<int> pieces(n.size(), 1);
  if (o.prefill_pieces > 1) {
    for (size_t i = 0; i < n.size(); ++i) pieces[i] = std::min(o.prefill_pieces, int(n[i]));
    return pieces;
  }
  const int64_t items = tiles * hkv;
  if (!o.balance_prefill || items == 0 || (items >= sm && items % sm == 0)) return pieces;
  // The tail: tiles with an item in the last, partial round (every tile when there is only that round).
  const int64_t plain = items >= sm ? (items / sm * sm) / hkv : 0;
  // Longest CTA's work with the tail split into (at most) s pieces a tile; the plain tiles' loads are the
  // same for every s whose grid is the whole machine.
  std::vector<int64_t> base;
  auto longest = [&](int s) {
    int64_t total = plain * hkv;
    for (int64_t i = plain; i < tiles; ++i) total += std::min<int64_t>(s, n[size_t(i)]) * hkv;
    const int64_t grid = std::min(sm, total);
    std::vector<int64_t> loads;
    if (grid == sm && !base.empty()) {
      loads = base;
    } else {
      loads.assign(size_t(grid), 0);
      for (int64_t j = 0; j < plain * hkv; ++j) add_item(loads, j, n[size_t(j / hkv)] + kItemCost);
      if (grid == sm) base = loads;
    }
    int64_t j = plain * hkv;
    for (int64_t i = plain; i < tiles; ++i) {
      const int ps = int(std::min<int64_t>(s, n[size_t(i)]));
      for (int q = 0; q < ps; ++q)
        for (int64_t h = 0; h < hkv; ++h) add_item(loads, j++, piece_tiles(n[size_t(i)], q, ps) + kItemCost);
    }
    return std::pair{*std::max_element(loads.begin(), loads.end()), total - plain * hkv};
  };
  const int64_t whole = longest(1).first;
  int64_t best = whole;
  int best_s = 1;
  for (int s = 2; s <= 16; ++s) {
    const auto [t, tail_items] = longest(s);
    if (tail_items > 2 * sm) break;  // the workspace bound (prefill_workspace_bound)
    if (t < best) best = t, best_s = s;
  }
  if (best_s == 1 || whole - best < std::max(kMinSplitGain, whole * 3 / 100)) return pieces;
  for (int64_t i = plain; i < tiles; ++i) pieces[size_t(i)] = std::min(best_s, int(n[size_t(i)]));
  return pieces;
}

}  // namespace

size_t prefill_workspace_bytes(int num_partials, const PlanOptions& o) {
  return size_t(std::max(num_partials, 0)) * size_t(o.num_kv_heads) *
         size_t(prefill_partial_floats(o.prefill_rows)) * sizeof(float);
}

size_t prefill_workspace_bound(const PlanOptions& o) {
  if (o.prefill_pieces > 1) fail("attention plan: prefill_pieces (tests) has no workspace bound");
  if (!o.balance_prefill) return 0;
  // At most 2 x sm_count pieces' items (choose_pieces), each a record's KV head.
  return prefill_workspace_bytes(ceil_div(2 * int64_t(std::max(1, o.sm_count)), std::max(1, o.num_kv_heads)),
                                 o);
}

bool prefill_balance_enabled() {
  static const bool enabled = [] {
    const char* v = std::getenv("ORCHID_PREFILL_BALANCE");
    return v == nullptr || std::string_view(v) != "0";
  }();
  return enabled;
}

size_t plan_blob_bound(int max_tokens, int max_seqs, const PlanOptions& o) {
  const int group = std::max(1, o.num_q_heads / std::max(1, o.num_kv_heads));
  const int64_t t = std::max(max_tokens, 0), s = std::max(max_seqs, 0);
  const int64_t tiles = t / std::max(1, o.prefill_rows / group) + s;  // a partial tile a sequence at most
  const int64_t pieces = o.balance_prefill ? tiles + 2 * int64_t(std::max(1, o.sm_count)) : 0;
  const int64_t bucket = std::max<int64_t>(s, o.decode_bucket);
  const int64_t ints = 5 * std::max<int64_t>(s, o.seq_bucket) + 2 * std::max<int64_t>(t, o.token_bucket) +
                       2 * tiles + bucket + 5 * pieces + pieces + 1;
  return size_t(ints) * sizeof(int32_t);
}

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

  // Split keys for the full-attention Hopper launches (PlanOptions::balance_prefill / prefill_pieces).
  std::vector<int> pieces;
  if (o.balance_prefill || o.prefill_pieces > 1) {
    std::vector<int32_t> n(tiles.size());
    for (size_t i = 0; i < tiles.size(); ++i) n[i] = key_tiles(tiles[i].last_pos);
    pieces = choose_pieces(n, o);
    if (std::all_of(pieces.begin(), pieces.end(), [](int v) { return v == 1; })) pieces.clear();
  }

  const int32_t bucket = o.decode_bucket > 0 ? o.decode_bucket : int32_t(decodes.size());
  if (bucket < int32_t(decodes.size()))
    fail("attention plan: decode_bucket {} is smaller than the step's {} decodes", bucket, decodes.size());
  int splits = o.decode_splits;
  if (splits > kMaxDecodeSplits || o.max_decode_splits > kMaxDecodeSplits)
    fail("attention plan: at most {} decode splits (asked {}, bound {})", kMaxDecodeSplits, splits,
         o.max_decode_splits);
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

  static_assert(sizeof(AttnSeq) == 5 * sizeof(int32_t) && sizeof(PrefillTile) == 2 * sizeof(int32_t) &&
                sizeof(PrefillPiece) == 5 * sizeof(int32_t));
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
  pieces_off_ = blob_.size();
  std::vector<int32_t> split_tiles;
  int32_t records = 0, slots = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const PrefillTile& t = tiles[i].tile;
    if (pieces[i] > 1) split_tiles.push_back(records);
    for (int q = 0; q < pieces[i]; ++q, ++records)
      blob_.insert(blob_.end(), {t.seq, t.q0, q, pieces[i], pieces[i] > 1 ? slots++ : -1});
  }
  split_tiles_off_ = blob_.size();
  blob_.insert(blob_.end(), split_tiles.begin(), split_tiles.end());
  sizes_.num_prefill_pieces = records;
  sizes_.num_split_tiles = int32_t(split_tiles.size());
  sizes_.num_partials = slots;
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
  if (sizes_.num_split_tiles > 0) {
    p.prefill_pieces = reinterpret_cast<const PrefillPiece*>(base + pieces_off_);
    p.split_tiles = base + split_tiles_off_;
  }
  return p;
}

size_t AttentionPlanBuilder::prefill_workspace_bytes() const {
  const int64_t rows = int64_t(sizes_.prefill_tokens_per_tile) * (sizes_.num_q_heads / sizes_.num_kv_heads);
  return size_t(sizes_.num_partials) * size_t(sizes_.num_kv_heads) * size_t(prefill_partial_floats(rows)) *
         sizeof(float);
}

size_t AttentionPlanBuilder::decode_workspace_bytes() const {
  return attention::decode_workspace_bytes(sizes_.decode_bucket, sizes_.decode_q, sizes_.num_q_heads,
                                           sizes_.decode_splits);
}

}  // namespace orchid::kernels::attention
