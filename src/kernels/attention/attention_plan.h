// The attention plan: per-step metadata built once on the host, uploaded in one copy, and shared by every
// layer's RoPE/KV-write, prefill and decode launches, which then only pass pointers.
//
// Host side: AttentionPlanBuilder::build() turns the step's sequences into one int32 blob (sequence records,
// per-token sequence/position, the prefill tile list, the decode slot list). The runtime copies the blob to a
// device buffer it owns (cudaMemcpyAsync from pinned memory; no allocation or synchronisation in the step)
// and calls device_view() to get an AttentionPlan of device pointers into it.
//
// CUDA graphs (decode): with PlanOptions::token_bucket, ::seq_bucket, ::decode_bucket and ::decode_splits
// fixed, a pure decode step's blob has the same layout and every grid the same size for the bucket; padding
// slots and tokens hold -1 and their CTAs return at once, and each sequence's lengths are read on the
// device. Replaying a captured decode step only needs the new blob copied to the same device address.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace orchid::kernels::attention {

// The most KV splits a decode may take (the merge kernel reads them two a lane).
constexpr int kMaxDecodeSplits = 64;

enum TableKind : int32_t { kFullTable = 0, kSlidingTable = 1 };

// One sequence of the step, as the kernels read it (five int32, 4-byte aligned).
struct AttnSeq {
  int32_t q_start;         // first of its new tokens in the step's token arrays (q, out, qkv rows)
  int32_t num_q;           // new tokens this step (0 allowed: nothing to do)
  int32_t start_pos;       // position of its first new token = tokens already in the cache
  int32_t table_begin[2];  // row offsets into the full / sliding page tables (TableKind)
};

// A prefill CTA's work: query tokens [q0, q0 + tokens_per_tile) of sequence `seq` (clipped to num_q).
struct PrefillTile {
  int32_t seq;
  int32_t q0;
};

// A work record of the full-attention launches of the Hopper prefill kernel when the plan splits the keys of
// some tiles (PlanOptions::balance_prefill): tile (seq, q0) whole (pieces == 1, slot -1), or its share
// `piece` of `pieces` of the key tiles, whose unnormalised result goes to partial slot `slot` (a split
// tile's pieces are consecutive records with consecutive slots); a merge kernel then adds the pieces up.
struct PrefillPiece {
  int32_t seq;
  int32_t q0;
  int32_t piece;
  int32_t pieces;
  int32_t slot;
};

// Floats of one partial result (a piece's KV head): rows x 64 of unnormalised O, then each row's (max, sum)
// padded to 16 bytes.
inline constexpr int64_t prefill_partial_floats(int64_t rows) {
  return rows * 64 + ((2 * rows + 3) & ~int64_t(3));
}

// Device view of an uploaded plan. Pointers address the device blob; counts are host-known grid sizes.
struct AttentionPlan {
  const AttnSeq* seqs = nullptr;
  const int32_t* token_seq = nullptr;  // [num_tokens]: sequence of each token, -1 for padding tokens
  const int32_t* token_pos = nullptr;  // [num_tokens]: absolute position of each token
  const PrefillTile* prefill_tiles = nullptr;
  const int32_t* decode_seqs = nullptr;  // [decode_bucket]: sequence per decode slot, -1 for padding
  // Split keys (num_split_tiles > 0): the full-attention Hopper launches' records in place of
  // prefill_tiles, and the record index of each split tile's first piece (for the merge).
  const PrefillPiece* prefill_pieces = nullptr;  // [num_prefill_pieces]
  const int32_t* split_tiles = nullptr;          // [num_split_tiles]
  int32_t num_seqs = 0;
  int32_t num_tokens = 0;  // token rows (bucket size for graphs)
  int32_t num_prefill_tiles = 0;
  int32_t prefill_tokens_per_tile = 0;  // = kPrefillBlockM / group; checked by the launcher
  int32_t num_prefill_pieces = 0;       // records of prefill_pieces (0: no split)
  int32_t num_split_tiles = 0;
  int32_t num_partials = 0;  // piece records = partial slots (each Hkv x the tile's rows)
  int32_t decode_bucket = 0;
  int32_t decode_q = 1;       // most query tokens of a decode slot (the workspace's token stride)
  int32_t decode_splits = 1;  // KV splits per decode (sequence, KV head); > 1 needs the merge workspace
  int32_t decode_splits_window = 1;  // the same for launches with a sliding window (<= decode_splits)
  int32_t num_q_heads = 0;
  int32_t num_kv_heads = 0;
};

// Query rows of one prefill CTA (tokens x query heads of one KV group); the launcher and the plan agree.
// The mma.sync kernel takes 128-row tiles; the Hopper kernel 128 or 192 (two or three consumer warpgroups).
inline constexpr int kPrefillBlockM = 128;
inline constexpr int kPrefillBlockMHopper = 192;
// Query rows of a decode CTA (4 m16 tiles): a decode slot's query tokens times the query heads of one KV
// head. Sequences that do not fit (more tokens, or a larger group) go through the prefill kernel.
inline constexpr int kMaxDecodeRows = 64;

// A step's sequence as the engine knows it (StepSequence without the sampling fields).
struct PlanSequence {
  int32_t q_start = 0;
  int32_t num_q = 0;
  int32_t start_pos = 0;
  int32_t full_table_begin = 0;
  int32_t sliding_table_begin = 0;
};

struct PlanOptions {
  int num_q_heads = 64;
  int num_kv_heads = 8;
  int sm_count = 132;                 // the device's multiprocessors (kernels::device_info().sm_count)
  int prefill_rows = kPrefillBlockM;  // query rows of a prefill tile: kPrefillBlockM or kPrefillBlockMHopper
  int token_bucket = 0;               // token rows to plan for (>= tokens in the step; 0 = exactly those)
  int seq_bucket = 0;                 // sequence records to plan for (>= sequences; 0 = exactly those)
  int decode_bucket = 0;              // decode slots (>= decodes in the step; 0 = exactly those)
  int decode_splits = 0;  // KV splits per decode; 0 = chosen from the batch and the longest context
  // KV splits for sliding-window launches; 0 = decode_splits when that is given, else from `window` (a
  // window's few key tiles need fewer splits than the full layers' long contexts).
  int decode_splits_window = 0;
  int window = 0;  // the model's sliding window (keys per query), for decode_splits_window; 0 = none
  int max_decode_splits = kMaxDecodeSplits;  // bound for the automatic choice (and the workspace)
  // Most query tokens a sequence may have and still go to the decode kernel (a speculative verify step has
  // 1 + k; its queries are causal among themselves). 1: only single-token decodes.
  int max_decode_queries = 1;
  // Hopper prefill, full attention: split the keys of the tiles in the grid's last, partial round of items
  // into pieces when that shortens the longest CTA's work by enough to pay for the merge (a chunk of 2048
  // tokens deep in a sequence is 688 equal items on 132 SMs: 5.2 rounds that would take 6).
  bool balance_prefill = false;
  // Tests: > 1 splits every tile of at least two 128-key tiles into that many pieces (fewer where it has
  // fewer key tiles), whatever the balance.
  int prefill_pieces = 0;
};

// KV splits for a decode grid of `bucket` slots when the context is not known (CUDA graphs) or long:
// enough CTAs for two per multiprocessor, within [1, max_decode_splits].
int decode_splits_for(int bucket, const PlanOptions& options);
// KV splits for sliding-window launches given the full layers' `splits`: no split shorter than two 64-key
// tiles of the window's range (gpt-oss's 128 keys: one split, no merge).
int window_splits_for(int splits, int decode_q, const PlanOptions& options);

class AttentionPlanBuilder {
 public:
  // Sequences with 1 <= num_q <= max_decode_queries and num_q * Hq / Hkv <= kMaxDecodeRows go to the
  // decode kernel, other non-empty ones to the prefill kernel, num_q == 0 to neither. Throws orchid::Error on
  // inconsistent input (overlapping or out-of-range token ranges, bad head counts, too small buckets).
  void build(const std::vector<PlanSequence>& seqs, int32_t num_tokens, const PlanOptions& options);

  const std::vector<int32_t>& blob() const { return blob_; }
  size_t blob_bytes() const { return blob_.size() * sizeof(int32_t); }
  // Pointers into `device_blob` (a device copy of blob()).
  AttentionPlan device_view(const void* device_blob) const;
  // Bytes of the decode split-KV workspace the decode launcher needs (0 when decode_splits == 1).
  size_t decode_workspace_bytes() const;
  // Bytes of the prefill pieces' partial results (0 without split keys).
  size_t prefill_workspace_bytes() const;
  // What sink_attention's workspace must hold for this plan: the larger of the two (the prefill launches
  // are done with it before the decode launch of the same layer starts).
  size_t workspace_bytes() const { return std::max(decode_workspace_bytes(), prefill_workspace_bytes()); }
  const AttentionPlan& sizes() const { return sizes_; }  // counts only (pointers null)

 private:
  std::vector<int32_t> blob_;
  AttentionPlan sizes_;
  size_t seqs_off_ = 0, token_seq_off_ = 0, token_pos_off_ = 0, tiles_off_ = 0, decode_off_ = 0;
  size_t pieces_off_ = 0, split_tiles_off_ = 0;
};

// Bytes of decode workspace for the given sizes: partial outputs [bucket][decode_q][Hq][splits][64] fp32
// followed by their log-sum-exps [bucket][decode_q][Hq][splits] fp32.
size_t decode_workspace_bytes(int decode_bucket, int decode_q, int num_q_heads, int decode_splits);
// The most decode workspace a plan built with `options` (automatic splits, or decode_splits_for's) needs
// for steps of at most `max_slots` decode slots.
size_t decode_workspace_bound(int max_slots, const PlanOptions& options);

// Prefill partial results: per piece record and KV head, prefill_partial_floats(rows) fp32.
size_t prefill_workspace_bytes(int num_partials, const PlanOptions& options);
// The most prefill workspace a plan built with `options` needs (balance_prefill keeps the pieces' items
// within two per multiprocessor; 0 without it).
size_t prefill_workspace_bound(const PlanOptions& options);
// ORCHID_PREFILL_BALANCE=0 turns PlanOptions::balance_prefill off where the runtime and the benchmarks
// would set it (for measurement); true otherwise.
bool prefill_balance_enabled();
// The most blob bytes a plan of at most `max_tokens` token rows and `max_seqs` sequences takes.
size_t plan_blob_bound(int max_tokens, int max_seqs, const PlanOptions& options);

}  // namespace orchid::kernels::attention
