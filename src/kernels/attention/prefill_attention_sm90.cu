// Prefill sink attention for Hopper in the FlashAttention-3 manner: a producer warp that brings Q and the K/V
// pages in with TMA, and two or three consumer warpgroups on wgmma for both products, each overlapping its
// softmax with its own MMAs.
//
// Tiling. A CTA owns 64 * kConsumers query rows (128 or 192) = tokens x the G query heads of one KV head,
// row r = (token r / G, head r % G), as the mma.sync kernel (prefill_attention.cu); consumer warpgroup c
// owns rows 64c .. 64c + 63. Keys come in tiles of 128 (kBlockN; 64 with a sliding window, or one stage a
// window item with 8 query heads a KV head: the window tile, below Shape), visited from the
// diagonal tile down, through a ring of kStages stages with separate K and V "full" barriers (QK^T starts as
// soon as K has landed) and one "empty" barrier per stage that every consumer warpgroup arrives on when it is
// done with the stage.
//
// Loads. Q: one 3-D box [tokens][G heads][64] of the q tensor. K and V: one 2-D box per page (page_size rows
// of 128 bytes; a page is contiguous per KV head, kv_layout.h), 128-byte swizzled by the TMA unit, which is
// the layout wgmma's descriptors read. The producer warp's lanes read a tile's page ids with one load, a
// tile ahead, and issue one box each (one thread reading 8 page ids in turn could not keep up with 16-token
// pages: measured 10% slower than 64-token pages). Pages outside [kv_begin, kv_end) of the CTA and pages
// marked kNoPage are not copied; their shared rows hold stale data. K rows there only produce scores that the
// mask sets to -inf; V rows would meet P = 0, and 0 * NaN is NaN, so in the (at most two) edge tiles every
// consumer warpgroup zeroes the V rows of keys outside the range before its P V (a benign race: all write
// zeros).
//
// Consumer loop (per warpgroup, 64 rows), with S_j = Q K_j^T, P_j its probabilities:
//   S_0; softmax(S_0) -> P_0
//   for j >= 1: issue S_j (SS wgmma m64n128k16 x 4), issue O += P_{j-1} V_{j-1} (RS wgmma m64n72k16 x 8),
//               wait for S_j, softmax(S_j) while P V runs, wait for P V, release stage j-1, rescale O
//   O += P_last V_last
// The warpgroups take turns to issue their MMAs (named barriers, see turn_wait), which staggers their
// softmaxes against each other's MMAs: +13% at 32k over letting them run in step. Not with the window tile,
// whose items are one product of each kind a warpgroup (+2-3% on the window line without them).
// Softmax as in the mma.sync kernel: log2 domain, running max initialised at the sink. The row sums come
// from the tensor cores: P V is m64n72, its 8 extra columns a block of ones, so each of them accumulates
// the row's sum of P (as bf16, the P the product uses); the sink's term is kept apart and added after the
// item's last P V. That takes 64 adds a thread and tile off the softmax, whose instructions bound the kernel
// (computing an eighth of the exponentials on the FMA pipe instead of MUFU made it 5.6% slower:
// bench/RESULTS.md). The running max moves lazily (softmax below), so most tiles rescale nothing.
//
// Registers: a consumer thread holds S (64 fp32), P (32 bf16x2), O and its row sums (36 fp32); setmaxnreg
// moves the producer warpgroup's registers to the consumers (24 vs 240 with two consumers, 32 vs 160 with
// three: all the launch allocates; with 24 the producer's item loop spills a few bytes, as it does with two
// consumers). Shared memory: two Q buffers of 16/24 KB + kStages x (K 16 KB + V 16 KB) + 2 KB of ones; one
// CTA per SM.
//
// Persistent grid: one CTA per SM loops over the work items (tile x KV head) with the producer running
// ahead into the next item (its Q into the other buffer, its K/V tiles into the ring as stages free up):
// a sliding window's item is only three 64-key tiles, so a CTA per item spent much of its life starting up
// and filling the pipeline. ORCHID_PREFILL_PERSISTENT=0 launches one CTA per item instead.
//
// Split keys (PlanOptions::balance_prefill; full attention): the launch's items are the plan's PrefillPiece
// records, a piece taking its share of its tile's key tiles from the top; pieces write unnormalised
// partial results that prefill_merge.cu adds up. That is its own instantiation (kPieces), so whole-tile
// launches run the kernel without it.
//
// Napkin math (20b full layer, causal 32k): 8.8e12 FLOP; at 550 TFLOP/s 16 ms per layer. Per 128-key tile
// and warpgroup: 2.1 MFLOP of MMA (512 tensor-core cycles at ~4096 FLOP/cycle/SM) and 8192 exp2 (512
// MUFU cycles at 16/cycle/SM): with head dim 64 the exponentials cost as much as the MMAs, so both must
// overlap across the warpgroups for the kernel to approach the tensor-core ceiling.
#include <cuda.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "kernels/attention/kv_layout.h"
#include "kernels/attention/paged_kv.cuh"
#include "kernels/attention/prefill_params.h"
#include "kernels/attention/warp_mma.cuh"
#include "kernels/attention/warpgroup_mma.cuh"
#include "kernels/common/bulk_copy.cuh"
#include "kernels/common/cuda_check.h"
#include "kernels/common/device_info.h"
#include "kernels/common/smem_attribute.h"
#include "kernels/common/tensor_map.h"

namespace orchid::kernels::attention::detail {
namespace {

using kernels::bulk_commit;
using kernels::bulk_wait;
using kernels::bulk_wait_read;
using kernels::mbar_arrive;
using kernels::mbar_arrive_expect_tx;
using kernels::mbar_init;
using kernels::mbar_init_fence;
using kernels::mbar_wait;
using kernels::mbar_wait_idle;
using kernels::tensor_copy_2d;
using kernels::tensor_copy_3d;
using kernels::tensor_store_3d;

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kMaxSlack = 8.0f;  // how far a row's max may pass the running one before it moves (softmax)
constexpr int kTurnBarrier = 4;    // named barriers 4 .. 4 + consumers - 1 (1 .. 3: each warpgroup's own)

// kBlockN keys per tile: 128 for full attention, 64 for sliding windows in general (a 128-key window under
// a tile of 16-24 tokens spans ~150 keys: three 64-key tiles waste less than two or three of 128), and
// kWindowTileKeys for windows of up to 128 keys at 8 query heads a KV head: the window tile (below).
constexpr int kWindowTileKeys = 144;
// The window tile: a warpgroup's 64 rows are 8 tokens, whose windows span at most 127 + 8 keys; from the
// first one's window start rounded down to 8 that is at most 142, so one 144-key product covers them (128
// of the 144 columns count in every row, against 128 of 192 in three 64-key tiles). The CTA's warpgroups
// start 8 tokens apart, so their spans lie in one stage of 192 keys from a 16-aligned start, each at a
// 1024-byte offset (a whole number of swizzle atoms): one Q K^T, one softmax and one P V a warpgroup and
// item.
constexpr int kWindowStageKeys = 192;
// The window tile's TMA box rows (a page's piece; fewer with smaller pages): the producer's boxes and the
// K/V tensor maps' box must agree.
constexpr int kWindowBoxRows = 16;

template <int kConsumers, int kBlockN>
struct Shape {
  static constexpr bool kWindowTile = kBlockN == kWindowTileKeys;
  static constexpr int kStageKeys = kWindowTile ? kWindowStageKeys : kBlockN;  // keys of a ring stage
  static constexpr int kStages = kBlockN == 64 ? 4 : 3;                        // K/V ring depth
  static constexpr int kTileBytes = kStageKeys * kHeadDim * 2;
  static constexpr int kRows = 64 * kConsumers;
  static constexpr int kThreads = 128 * (kConsumers + 1);
  static constexpr int kQBytes = kRows * kHeadDim * 2;  // one of the two Q buffers
  static constexpr int kKOffset = 2 * kQBytes;          // from the 1024-aligned base
  static constexpr int kVOffset = kKOffset + kStages * kTileBytes;
  static constexpr int kOnesOffset = kVOffset + kStages * kTileBytes;  // 16 x 64 bf16 ones (row sums)
  static constexpr int kBarOffset = kOnesOffset + 16 * 128;
  static constexpr int kBarriers =
      3 * kStages + 4;  // full K, full V, empty per stage; full, empty per Q buffer
  static constexpr int kSmemBytes = 1024 + kBarOffset + kBarriers * 8;
  static constexpr int kConsumerRegs = kConsumers == 2 ? 240 : 160;
  static constexpr int kProducerRegs = kConsumers == 2 ? 24 : 32;  // what the launch allocation leaves
};

template <int kConsumers, int kBlockN, bool kPieces>
struct HopperKernelTag;

// Q, K and V through TMA tensor maps, encoded per launch; out (boxes of 2 tokens x 8 heads) for the window
// tile's output when stored by TMA (the default; ORCHID_PREFILL_TMA_STORE=0 turns it off).
struct HopperPrefillMaps {
  CUtensorMap q, k, v, out;
  bool store_by_tma = false;
};

// Work item w: the plan's tile w / Hkv under KV head w % Hkv, and the keys it reads. Its key tiles are
// visited from the top down: tile t holds keys [key_top - (t + 1) kBlockN, key_top - t kBlockN). Causal
// tiles are aligned to kBlockN. A window's are aligned to the page boxes (16 keys with 16-token pages), so
// the ~151 keys of a 24-token tile under a 128-key window always take three 64-key tiles, not 3.34 on
// average; the lowest tile may then start below key 0, whose rows are never copied and always masked.
// With the window tile the item has one stage of kWindowStageKeys keys from a 16-aligned start below the
// first query's window (window_key0), the same for every page size (its boxes are 16 rows).
template <int kBlockN, bool kPieces>
struct PrefillItem {
  static constexpr bool kWindowTile = kBlockN == kWindowTileKeys;
  static constexpr int kStageKeys = kWindowTile ? kWindowStageKeys : kBlockN;
  int kvh, seq_idx, n_tok, p_first, kv_begin, kv_end, key_top, n_tiles;
  int tok0;  // the tile's first token row of q / out

  __device__ __forceinline__ static PrefillItem of(const PrefillParams& p, int w) {
    PrefillItem it;
    uint32_t tile_idx, kvh;
    p.kv_heads.divmod(uint32_t(w), tile_idx, kvh);
    it.kvh = int(kvh);
    PrefillTile tile;
    int piece = 0, pieces = 1;
    if constexpr (kPieces) {
      const PrefillPiece rec = p.pieces[tile_idx];
      tile = {rec.seq, rec.q0};
      piece = rec.piece;
      pieces = rec.pieces;
    } else {
      tile = p.tiles[tile_idx];
    }
    const AttnSeq seq = p.seqs[tile.seq];
    it.seq_idx = tile.seq;
    it.n_tok = min(p.tokens_per_tile, seq.num_q - tile.q0);
    it.p_first = seq.start_pos + tile.q0;
    it.kv_begin = p.window > 0 ? max(0, it.p_first - p.window + 1) : 0;
    it.kv_end = it.p_first + it.n_tok;  // one past the last query's position
    if constexpr (kWindowTile) {
      it.key_top = (window_key0(it.p_first, 0, p.window) & ~15) + kStageKeys;
      it.n_tiles = 1;
    } else {
      const int align = p.window > 0 ? min(1 << p.page_size_log2, kBlockN) : kBlockN;
      it.key_top = (it.kv_end + align - 1) / align * align;
      it.n_tiles = (it.key_top - it.kv_begin / align * align + kBlockN - 1) / kBlockN;
      if (pieces > 1) {  // key tiles [piece n / pieces, (piece + 1) n / pieces) from the top
        const int tb = piece * it.n_tiles / pieces, te = (piece + 1) * it.n_tiles / pieces;
        it.key_top -= tb * kBlockN;
        it.n_tiles = te - tb;
      }
    }
    it.tok0 = seq.q_start + tile.q0;
    return it;
  }
  // The window tile: the first key of consumer warpgroup c's 144 (its first token's window start rounded
  // down to 8; below 0 at a sequence's start, where those rows are never copied and always masked).
  __device__ __forceinline__ static int window_key0(int p_first, int c, int window) {
    return (p_first + 8 * c - window + 1) & ~7;  // rounds toward -inf in two's complement
  }
  // Split keys (p.pieces, full attention): item w's piece of its tile (0 when whole) and the slot of its
  // partial result (-1: whole, written to out). Read again where needed rather than held in registers
  // through the item's key loop.
  __device__ __forceinline__ static int piece_of(const PrefillParams& p, int w) {
    if constexpr (kPieces) return p.pieces[p.kv_heads.div(uint32_t(w))].piece;
    return 0;
  }
  __device__ __forceinline__ static int slot_of(const PrefillParams& p, int w) {
    if constexpr (kPieces) return p.pieces[p.kv_heads.div(uint32_t(w))].slot;
    return -1;
  }
  __device__ __forceinline__ int p_last() const { return kv_end - 1; }
  __device__ __forceinline__ int key0(int t) const { return key_top - (t + 1) * kStageKeys; }
};

// The items of a persistent CTA: round r of the grid takes items [r * grid, (r + 1) * grid), CTA b the b-th
// of them in even rounds and the b-th from the end in odd ones. The plan orders tiles heaviest first, so the
// zig-zag evens out what the CTAs' rounds add up to (straight rounds would give CTA 0 the heaviest item
// of every round). Only the last round can be short (some CTAs have no item there), so a CTA's items end
// at its first round whose item is past the end; the grid is never larger than the item count.
__device__ __forceinline__ int round_item(int r) {
  const int grid = int(gridDim.x), b = int(blockIdx.x);
  return r * grid + ((r & 1) ? grid - 1 - b : b);
}

// Persistent: the CTA serves the items of its rounds (round_item); with a grid of one CTA per item it is the
// one-shot kernel. The producer runs ahead across
// items: the next item's Q goes to the other Q buffer and its K/V tiles into the ring as stages free up, so
// a short item (a sliding window's three tiles) no longer pays a CTA's start-up and pipeline fill.
template <int kConsumers, int kBlockN, bool kPieces>
__global__ void __launch_bounds__(Shape<kConsumers, kBlockN>::kThreads, 1)
    prefill_hopper_kernel(const __grid_constant__ PrefillParams p, const __grid_constant__ CUtensorMap qmap,
                          const __grid_constant__ CUtensorMap kmap, const __grid_constant__ CUtensorMap vmap,
                          const __grid_constant__ CUtensorMap omap, int num_items, bool store_by_tma) {
  using Sh = Shape<kConsumers, kBlockN>;
  using Item = PrefillItem<kBlockN, kPieces>;
  constexpr int kStages = Sh::kStages, kTileBytes = Sh::kTileBytes;
  constexpr int kNt = kBlockN / 8;   // n8 column tiles of S
  constexpr int kKs = kBlockN / 16;  // k16 steps of P V
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  const uint32_t raw = smem_addr(smem_raw);
  uint8_t* smem = smem_raw + (((raw + 1023u) & ~1023u) - raw);  // swizzle atoms are 1024-byte aligned
  const uint32_t base = smem_addr(smem);
  uint64_t* full_k = reinterpret_cast<uint64_t*>(smem + Sh::kBarOffset);
  uint64_t* full_v = full_k + kStages;
  uint64_t* empty = full_v + kStages;
  uint64_t* q_full = empty + kStages;  // [2]
  uint64_t* q_empty = q_full + 2;      // [2]

  const int tid = threadIdx.x;
  const int wg = tid >> 7;
  // The window tile is launched for 8 query heads a KV head only: a constant turns the row -> (token, head)
  // divisions into shifts, which a short window item would otherwise pay several times.
  const int G = Sh::kWindowTile ? 8 : p.group;

  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(&full_k[s], 1);
      mbar_init(&full_v[s], 1);
      mbar_init(&empty[s], kConsumers);
    }
    for (int b = 0; b < 2; ++b) {
      mbar_init(&q_full[b], 1);
      mbar_init(&q_empty[b], kConsumers);
    }
    mbar_init_fence();
  }
  __syncthreads();

  if (wg == 0) {
    // Producer: warp 0; lane b owns box b (one page, or a tile's share of a larger page) of every tile, so
    // the page-table reads of a tile are one warp-wide load, issued a tile ahead of its copies. The rest of
    // the warpgroup gives its registers away and leaves.
    setmaxnreg_dec<Sh::kProducerRegs>();
    if (tid >= 32) return;
    const int lane = tid;
    const int ps_log2 = p.page_size_log2;
    const int box_rows = min(1 << ps_log2, Sh::kWindowTile ? kWindowBoxRows : kBlockN);
    const int boxes = Sh::kStageKeys / box_rows;  // <= 24: pages of >= 8 tokens
    const uint32_t box_bytes = uint32_t(box_rows) * kHeadDim * 2;
    int g = 0;  // K/V tiles this CTA has loaded, over all its items: tile g uses stage g % kStages
    for (int k = 0; round_item(k) < num_items; ++k) {  // the CTA's item k uses Q buffer k % 2
      const Item it = Item::of(p, round_item(k));
      const int qb = k & 1;
      if (lane == 0) {
        if (k >= 2) mbar_wait_idle(&q_empty[qb], uint32_t(((k >> 1) - 1) & 1));  // item k - 2 is written out
        mbar_arrive_expect_tx(&q_full[qb], uint32_t(G * p.tokens_per_tile * kHeadDim * 2));
        tensor_copy_3d(smem + qb * Sh::kQBytes, &qmap, 0, it.kvh * G, it.tok0, &q_full[qb]);
      }
      const PagedKv kv =
          PagedKv::of(p.seqs, it.seq_idx, p.page_table, p.table_kind, ps_log2, p.num_kv_heads, it.kvh);
      // This lane's page of tile t, or -1 when the box is not copied (outside the range, or kNoPage).
      auto box_page = [&](int t) {
        const int t0 = it.key0(t) + lane * box_rows;
        if (t >= it.n_tiles || lane >= boxes || t0 + box_rows <= it.kv_begin || t0 >= it.kv_end)
          return int32_t(-1);
        return kv.table[t0 >> ps_log2];
      };
      int32_t page = box_page(0);
      for (int t = 0; t < it.n_tiles; ++t, ++g) {
        const int32_t next = box_page(t + 1);  // in flight while this tile waits for its stage
        const int st = g % kStages;
        const int t0 = it.key0(t) + lane * box_rows;
        const unsigned copied = __ballot_sync(0xffffffffu, page >= 0);
        if (lane == 0) {
          if (g >= kStages) mbar_wait_idle(&empty[st], uint32_t((g / kStages - 1) & 1));
          const uint32_t bytes = uint32_t(__popc(copied)) * box_bytes;
          mbar_arrive_expect_tx(&full_k[st], bytes);
          mbar_arrive_expect_tx(&full_v[st], bytes);
        }
        __syncwarp();
        if (page >= 0) {
          const int row = kv.row(page, t0);
          tensor_copy_2d(smem + Sh::kKOffset + st * kTileBytes + lane * box_bytes, &kmap, 0, row,
                         &full_k[st]);
          tensor_copy_2d(smem + Sh::kVOffset + st * kTileBytes + lane * box_bytes, &vmap, 0, row,
                         &full_v[st]);
        }
        page = next;
      }
    }
    return;
  }

  // Consumers.
  setmaxnreg_inc<Sh::kConsumerRegs>();
  const int cw = wg - 1;
  const int ctid = tid & 127;
  const int lane = tid & 31, warp_in = ctid >> 5;
  const int hq = p.num_q_heads;
  // The B operand of the row sums' 8 extra P V columns: 16 rows of bf16 ones, written by every warpgroup
  // (the same values) and read at every k16 step.
  reinterpret_cast<uint4*>(smem + Sh::kOnesOffset)[ctid] =
      make_uint4(0x3f803f80u, 0x3f803f80u, 0x3f803f80u, 0x3f803f80u);
  fence_proxy_async_smem();
  named_barrier_sync(1 + cw, 128);
  const uint32_t ones = base + uint32_t(Sh::kOnesOffset);

  // Turns: the warpgroups issue their MMAs in a fixed order (0, 1, .., 0, ..), each after the previous one's
  // issue, so that one warpgroup's softmax runs while the others' MMAs hold the tensor cores instead of all
  // of them doing their exponentials at once. Warpgroup c waits on barrier kTurnBarrier + c, which its
  // predecessor arrives on; every warpgroup has n_tiles + 1 issue events an item, the chain runs on from
  // one item to the next, and the last warpgroup's last arrival of the CTA (for a turn nobody takes) is
  // left out.
  constexpr bool kTurns = !Sh::kWindowTile;  // not for the window tile (file comment)
  auto turn_wait = [&]() {
    if constexpr (kTurns) named_barrier_sync(kTurnBarrier + cw, 256);
  };
  auto turn_pass = [&](bool cta_last_event) {
    if constexpr (kTurns)
      if (!(cta_last_event && cw == kConsumers - 1))
        named_barrier_arrive(kTurnBarrier + (cw + 1) % kConsumers, 256);
  };
  if (kTurns && cw == kConsumers - 1) named_barrier_arrive(kTurnBarrier, 256);

  // The ring position of the item's first K/V tile (the producer's count g: stage g % kStages, phase
  // (g / kStages) & 1), advanced tile by tile rather than divided out (kStages is 3) twice a tile.
  int ring_stage = 0;
  uint32_t ring_phase = 0;
  auto advance = [](int& stage, uint32_t& phase) {
    if (++stage == kStages) {
      stage = 0;
      phase ^= 1u;
    }
  };
  for (int k = 0; round_item(k) < num_items; ++k) {  // the CTA's k-th item
    const Item it = Item::of(p, round_item(k));
    const bool cta_last_item = round_item(k + 1) >= num_items;
    const int qb = k & 1;
    const int rows_valid = it.n_tok * G;
    const uint32_t q_rows = base + uint32_t(qb * Sh::kQBytes + cw * 64 * 128);
    uint8_t* const q_buf = smem + qb * Sh::kQBytes;
    // The window tile: this warpgroup's keys [wk0, wk0 + kBlockN), at byte woff of the item's stage.
    const int wk0 = Sh::kWindowTile ? Item::window_key0(it.p_first, cw, p.window) : 0;
    const int woff = Sh::kWindowTile ? (wk0 - it.key0(0)) * kHeadDim * 2 : 0;
    auto tile_key0 = [&](int t) { return Sh::kWindowTile ? wk0 : it.key0(t); };

    int row_pos[2], row_lo[2];
    // The running max of a row (log2 units), what its exponentials subtract (m_run, or 0 while that is
    // -inf), and how far a tile's max may reach before it moves (softmax, below).
    float m_run[2], m_use[2], m_move[2];
    // O and, in columns 64..71 (o[32..35]: o[32 + 2h] and o[33 + 2h] for row h), the row sum of P: P V runs
    // as m64n72 with a block of ones for those columns, so the tensor cores add up the probabilities (as the
    // bf16 P V sees them) instead of 64 adds a thread and tile. Every column of a row holds the whole sum.
    // The item's first P V overwrites O (scale-d 0) instead of adding to zeros: zeroing the 36 registers
    // took ~64 instructions an item (uniform moves), which the window tile's one-product items paid each
    // time. The sink's term of the row sums (sink_l) is held apart, rescaled with O, and added at the end.
    float o[36];
    float sink_l[2];
    const bool first_piece = Item::piece_of(p, round_item(k)) == 0;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = cw * 64 + warp_in * 16 + h * 8 + (lane >> 2);
      const int tok = min(r / G, it.n_tok - 1);  // padding rows borrow the last token's mask
      const int pos = it.p_first + tok;
      row_pos[h] = pos;
      row_lo[h] = p.window > 0 ? max(0, pos - p.window + 1) : 0;  // keys below 0: masked
      const int head = it.kvh * G + (r % G);
      if (p.sinks != nullptr) {  // the sink's term in the first piece's sum only; every piece's max
        m_run[h] = p.sinks[head] * kLog2e;
        sink_l[h] = first_piece ? 1.0f : 0.0f;  // exp2(sink - m)
      } else {
        m_run[h] = -INFINITY;
        sink_l[h] = 0.0f;
      }
      m_use[h] = m_run[h] == -INFINITY ? 0.0f : m_run[h];
      m_move[h] = m_run[h] + kMaxSlack;
    }

    float s[kBlockN / 2];
    uint32_t pf[kKs][4];

    // A k16 step is 32 bytes on in both operands (wgmma_desc_advance).
    const uint64_t q_desc = smem_desc_sw128(q_rows, 16, 1024);
    auto issue_qk = [&](int st) {
      const uint64_t k_desc =
          smem_desc_sw128(base + uint32_t(Sh::kKOffset + st * kTileBytes + woff), 16, 1024);
      fence_operands(s);
      wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < 4; ++ks) {
        const uint64_t da = wgmma_desc_advance(q_desc, 32 * ks), db = wgmma_desc_advance(k_desc, 32 * ks);
        if constexpr (kBlockN == 128)
          wgmma_m64n128k16_ss(s, da, db, ks > 0 ? 1 : 0);
        else if constexpr (kBlockN == kWindowTileKeys)
          wgmma_m64n144k16_ss(s, da, db, ks > 0 ? 1 : 0);
        else
          wgmma_m64n64k16_ss(s, da, db, ks > 0 ? 1 : 0);
      }
      wgmma_commit();
    };
    // first: the item's first P V, which overwrites O.
    auto issue_pv = [&](int st, bool first) {
      const uint32_t vb = base + uint32_t(Sh::kVOffset + st * kTileBytes + woff);
      fence_operands(o);
      wgmma_fence();
      // Columns 64..71 come from the 64-column block the leading byte offset on: the ones, the same block
      // for every k16 step, so each step's descriptor moves the start 2048 bytes on and the offset back.
      const uint64_t d0 = smem_desc_sw128(vb, ones - vb, 1024);
      constexpr uint64_t kStep = (2048 >> 4) - (uint64_t(2048 >> 4) << 16);  // wraps: start +, offset -
#pragma unroll
      for (int kk = 0; kk < kKs; ++kk)
        wgmma_m64n72k16_rs<1>(o, pf[kk], d0 + uint64_t(kk) * kStep, kk > 0 || !first ? 1 : 0);
      wgmma_commit();
    };
    // V rows of keys outside [kv_begin, kv_end) in the tile from key k0 (stage st) set to zero, for this
    // warpgroup's P V: rows [0, lo) and [hi, kBlockN), the only ones the loop visits (a window item's
    // warpgroup has up to ~16 of its 144; visiting all of them took ~9 rounds of address work a thread).
    auto fix_edge_v = [&](int k0, int st) {
      if (k0 >= it.kv_begin && k0 + kBlockN <= it.kv_end) return;  // an inner tile: the common case
      const int lo = min(max(it.kv_begin - k0, 0), kBlockN);
      const int hi = max(min(it.kv_end - k0, kBlockN), lo);
      uint8_t* vb = smem + Sh::kVOffset + st * kTileBytes + woff;
      // 16 bytes a thread and round: chunk i is row i / 8.
#pragma unroll 1
      for (int i = ctid; i < lo * 8; i += 128)
        *reinterpret_cast<uint4*>(vb + i * 16) = make_uint4(0, 0, 0, 0);
#pragma unroll 1
      for (int i = hi * 8 + ctid; i < kBlockN * 8; i += 128)
        *reinterpret_cast<uint4*>(vb + i * 16) = make_uint4(0, 0, 0, 0);
      fence_proxy_async_smem();
      named_barrier_sync(1 + cw, 128);
    };
    // Mask, running max and probabilities of S (the tile from key k0) in place; alpha = rescale of the older
    // state; true when some row of the warp has alpha != 1.
    auto softmax = [&](int k0, float(&alpha)[2]) -> bool {
      // Some row masks a key of the tile: above the first query's position, or below the last query's
      // window start (or below key 0: a window's lowest tile can start there, see PrefillItem).
      const bool need_mask =
          (k0 + kBlockN - 1 > it.p_first) || (p.window > 0 && k0 < max(0, it.p_last() - p.window + 1));
      // The window tile under a 128-key window clear of key 0: a row's keys start within the first 15
      // columns (its window start is at most 14 past k0) and end at or after column 127 (its position is
      // at least k0 + 127), so only columns 0-15 and 128-143 can be masked.
      const bool edges_only = Sh::kWindowTile && p.window == 128 && k0 >= 0;
      auto mask_tile = [&](int nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int t = k0 + nt * 8 + 2 * (lane & 3) + (e & 1);
          const int h = e >> 1;
          if (t > row_pos[h] || t < row_lo[h]) s[nt * 4 + e] = -INFINITY;
        }
      };
      if (edges_only) {
#pragma unroll
        for (int nt = 0; nt < kNt; ++nt)
          if (nt < 2 || nt >= 16) mask_tile(nt);
      } else if (need_mask) {
#pragma unroll
        for (int nt = 0; nt < kNt; ++nt) mask_tile(nt);
      }
      // Both rows' maxima first, then their exponentials. The running max moves only when a row's new max
      // passes it by more than kMaxSlack (log2 units): the probabilities are then up to 2^kMaxSlack, well
      // inside fp32 and bf16 (whose precision is relative), and the row sums and O carry the same factor, so
      // the result is the same. Most tiles of a long row keep every max of the warp: one vote, and no
      // rescale of O (the return value: whether alpha is 1 in every row of the warp).
      float m_tile[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float mx = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < kNt; ++nt) mx = fmaxf(mx, fmaxf(s[nt * 4 + 2 * h], s[nt * 4 + 2 * h + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        m_tile[h] = mx * p.scale_log2;
      }
      const bool moves[2] = {m_tile[0] > m_move[0], m_tile[1] > m_move[1]};  // false for -inf
      alpha[0] = alpha[1] = 1.0f;
      const bool rescale = __any_sync(0xffffffffu, moves[0] || moves[1]);
      if (rescale) {
#pragma unroll
        for (int h = 0; h < 2; ++h)
          if (moves[h]) {  // m_tile is finite here
            alpha[h] = fast_exp2(m_run[h] - m_tile[h]);
            m_run[h] = m_use[h] = m_tile[h];
            m_move[h] = m_tile[h] + kMaxSlack;
          }
      }
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int nt = 0; nt < kNt; ++nt)
#pragma unroll
          for (int e = 2 * h; e < 2 * h + 2; ++e)
            s[nt * 4 + e] = fast_exp2(fmaf(s[nt * 4 + e], p.scale_log2, -m_use[h]));
      return rescale;
    };
    // After the item's last P V: the sink's term into the row sums.
    auto add_sink_l = [&]() {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        o[32 + 2 * h] += sink_l[h];
        o[33 + 2 * h] += sink_l[h];
      }
    };
    // O, its row sums and the sink's term times alpha.
    auto rescale_o = [&](const float(&alpha)[2]) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
#pragma unroll
        for (int dt = 0; dt < 9; ++dt) {
          o[dt * 4 + 2 * h] *= alpha[h];
          o[dt * 4 + 2 * h + 1] *= alpha[h];
        }
        sink_l[h] *= alpha[h];
      }
    };
    auto pack_p = [&]() {
#pragma unroll
      for (int kk = 0; kk < kKs; ++kk) {
        pf[kk][0] = pack_bf16(s[8 * kk + 0], s[8 * kk + 1]);
        pf[kk][1] = pack_bf16(s[8 * kk + 2], s[8 * kk + 3]);
        pf[kk][2] = pack_bf16(s[8 * kk + 4], s[8 * kk + 5]);
        pf[kk][3] = pack_bf16(s[8 * kk + 6], s[8 * kk + 7]);
      }
    };

    mbar_wait(&q_full[qb], uint32_t((k >> 1) & 1));
    int st = ring_stage;  // tile t's stage and phase
    uint32_t ph = ring_phase;
    mbar_wait(&full_k[st], ph);
    turn_wait();
    issue_qk(st);
    turn_pass(false);
    wgmma_wait<0>();
    fence_operands(s);
    {
      float alpha[2];
      softmax(tile_key0(0), alpha);
#pragma unroll
      for (int h = 0; h < 2; ++h) sink_l[h] *= alpha[h];  // no O yet: only the sink's term
      pack_p();
    }
    for (int t = 1; t < it.n_tiles; ++t) {
      const int prev = st;
      const uint32_t prev_ph = ph;
      advance(st, ph);
      mbar_wait(&full_k[st], ph);
      turn_wait();
      issue_qk(st);
      mbar_wait(&full_v[prev], prev_ph);
      fix_edge_v(tile_key0(t - 1), prev);
      issue_pv(prev, t == 1);
      turn_pass(false);
      wgmma_wait<1>();  // S of tile t; P V of the previous tile may still run
      fence_operands(s);
      float alpha[2];
      const bool rescale = softmax(tile_key0(t), alpha);
      wgmma_wait<0>();
      fence_operands(o);
      if (ctid == 0) mbar_arrive(&empty[prev]);
      if (rescale) rescale_o(alpha);
      pack_p();
    }
    {
      const int last = st;
      mbar_wait(&full_v[last], ph);
      turn_wait();
      fix_edge_v(tile_key0(it.n_tiles - 1), last);
      issue_pv(last, it.n_tiles == 1);
      turn_pass(cta_last_item);
      wgmma_wait<0>();
      fence_operands(o);
      if (ctid == 0) mbar_arrive(&empty[last]);  // the ring runs on into the next item
      add_sink_l();
    }

    bool fenced = false;  // this thread's generic accesses to the Q buffer are ordered before async ones
    if (const int slot = Item::slot_of(p, round_item(k)); slot >= 0) {
      // A piece: O unnormalised and each row's (max, sum) to its partial slot, for the merge.
      const int rows = p.tokens_per_tile * G;
      float* part = p.partial + size_t(slot * p.num_kv_heads + it.kvh) * size_t(prefill_partial_floats(rows));
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = cw * 64 + warp_in * 16 + h * 8 + (lane >> 2);
        if (r < rows_valid) {
#pragma unroll
          for (int dt = 0; dt < 8; ++dt)
            *reinterpret_cast<float2*>(part + r * kHeadDim + dt * 8 + (lane & 3) * 2) =
                make_float2(o[dt * 4 + 2 * h], o[dt * 4 + 2 * h + 1]);
          if ((lane & 3) == 0)
            *reinterpret_cast<float2*>(part + rows * kHeadDim + 2 * r) = make_float2(m_run[h], o[32 + 2 * h]);
        }
      }
    } else {
      // Normalise; stage the warp's 16 rows in its own rows of the Q buffer (its warpgroup's QK^T has
      // finished reading them), then whole-row 16-byte stores. A thread's two rows are 8 apart, so they
      // share the swizzle (swz: chunk ^ row % 8) and the second is 1024 bytes on.
      float inv[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float l = o[32 + 2 * h];
        // The approximate reciprocal (MUFU alone; l >= 1 here unless the row has no key and no sink): the
        // IEEE one is ~12 instructions with a slow-path branch, twice a thread and item.
        inv[h] = l > 0.0f ? fast_rcp(l) : 0.0f;
      }
      const int r0 = cw * 64 + warp_in * 16 + (lane >> 2);
      uint8_t* const row0 = q_buf + r0 * 128 + (lane & 3) * 4;
#pragma unroll
      for (int dt = 0; dt < 8; ++dt) {
        uint8_t* const at = row0 + ((dt ^ (r0 & 7)) << 4);
#pragma unroll
        for (int h = 0; h < 2; ++h)
          *reinterpret_cast<uint32_t*>(at + h * 1024) =
              pack_bf16(o[dt * 4 + 2 * h] * inv[h], o[dt * 4 + 2 * h + 1] * inv[h]);
      }
      // The window tile with tensor stores (the default): a warp's 16 rows are 2 whole tokens x 8 heads, laid
      // out as the out map's box (128-byte swizzle, as Q came in), so when both tokens are real one tensor
      // store moves them (~35 instructions a warp against ~60 for the 16-byte stores below). A partial
      // token keeps the stores: the box would write the next tile's rows.
      const int warp_tok = (cw * 64 + warp_in * 16) / G;
      if (Sh::kWindowTile && store_by_tma && warp_tok + 1 < it.n_tok) {
        fence_proxy_async_smem();
        fenced = true;
        __syncwarp();
        if (lane == 0) {
          tensor_store_3d(&omap, 0, it.kvh * G, it.tok0 + warp_tok, q_buf + (cw * 64 + warp_in * 16) * 128);
          bulk_commit();
          bulk_wait_read<0>();  // the buffer goes back to the producer below
        }
      } else if constexpr (Sh::kWindowTile) {
        // Round i: rows 4 i .. 4 i + 3 of the warp's 16, i.e. token warp_tok + i / 2, heads 4 (i % 2) ..;
        // one output address a thread, the rounds a token's or 4 heads' stride from it.
        __syncwarp();
        const int sub = lane >> 3, chunk = lane & 7;
        __nv_bfloat16* const dst =
            p.out + (size_t(it.tok0 + warp_tok) * hq + it.kvh * 8 + sub) * kHeadDim + chunk * 8;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          if (warp_tok + (i >> 1) < it.n_tok) {
            const int r = cw * 64 + warp_in * 16 + i * 4 + sub;
            *reinterpret_cast<uint4*>(dst + (i >> 1) * size_t(hq) * kHeadDim + (i & 1) * 4 * kHeadDim) =
                *reinterpret_cast<const uint4*>(q_buf + swz(r, chunk));
          }
        }
      } else {
        __syncwarp();
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int r = cw * 64 + warp_in * 16 + i * 4 + (lane >> 3);
          const int chunk = lane & 7;
          if (r < rows_valid) {
            const int tok = r / G;
            const uint4 v = *reinterpret_cast<const uint4*>(q_buf + swz(r, chunk));
            *reinterpret_cast<uint4*>(
                p.out + ((size_t(it.tok0) + tok) * hq + it.kvh * G + (r - tok * G)) * kHeadDim + chunk * 8) =
                v;
          }
        }
      }
    }
    // The Q buffer back to the producer (item k + 2's queries), its generic-proxy accesses ordered before
    // the tensor copy that will overwrite it.
    if (!fenced) fence_proxy_async_smem();
    named_barrier_sync(1 + cw, 128);
    if (ctid == 0) mbar_arrive(&q_empty[qb]);
    advance(st, ph);
    ring_stage = st;
    ring_phase = ph;
  }
  if (Sh::kWindowTile && store_by_tma && lane == 0) bulk_wait<0>();  // the tensor stores' writes done
}

// CTAs of the persistent grid: `ctas` when given, else one per SM (its registers allow no more: 384 threads
// take the whole register file), or one per item with ORCHID_PREFILL_PERSISTENT=0 (the one-shot grid, for
// comparison).
unsigned persistent_ctas(unsigned items, int ctas) {
  static const bool persistent = [] {
    const char* v = std::getenv("ORCHID_PREFILL_PERSISTENT");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  if (ctas > 0) return std::min(items, unsigned(ctas));
  if (!persistent) return items;
  return std::min(items, unsigned(std::max(device_info().sm_count, 1)));
}

template <int kConsumers, int kBlockN, bool kPieces = false>
void launch(const PrefillParams& p, const HopperPrefillMaps& maps, unsigned items, int ctas,
            cudaStream_t stream) {
  using Sh = Shape<kConsumers, kBlockN>;
  auto kernel = prefill_hopper_kernel<kConsumers, kBlockN, kPieces>;
  ensure_dynamic_smem<HopperKernelTag<kConsumers, kBlockN, kPieces>>(kernel, Sh::kSmemBytes);
  kernel<<<persistent_ctas(items, ctas), Sh::kThreads, Sh::kSmemBytes, stream>>>(
      p, maps.q, maps.k, maps.v, maps.out, int(items), maps.store_by_tma);
  ORCHID_CUDA_CHECK_LAUNCH();
}

// The kernel of kConsumers warpgroups for tiles of block_n keys (128, 64 or kWindowTileKeys).
template <int kConsumers>
void launch_tile(int block_n, const PrefillParams& p, const HopperPrefillMaps& maps, unsigned items, int ctas,
                 cudaStream_t stream) {
  if (block_n == 128)
    if (p.pieces != nullptr)  // split keys: the kernel that reads piece records (full attention only)
      launch<kConsumers, 128, true>(p, maps, items, ctas, stream);
    else
      launch<kConsumers, 128>(p, maps, items, ctas, stream);
  else if (block_n == 64)
    launch<kConsumers, 64>(p, maps, items, ctas, stream);
  else
    launch<kConsumers, kWindowTileKeys>(p, maps, items, ctas, stream);
}

}  // namespace

int hopper_prefill_consumers(int group, int tokens_per_tile) {
  if (tokens_per_tile == kPrefillBlockM / group) return 2;
  if (tokens_per_tile == kPrefillBlockMHopper / group) return 3;
  return 0;
}

void launch_prefill_hopper(const PrefillParams& p, int num_token_rows, int64_t num_pages, unsigned items,
                           int ctas, int tma_store, cudaStream_t stream) {
  const int consumers = hopper_prefill_consumers(p.group, p.tokens_per_tile);
  ORCHID_KERNEL_REQUIRE(consumers != 0, "sink_attention: plan built for another prefill tile shape");
  // ORCHID_PREFILL_WINDOW_TILE=0: windows on 64-key tiles only (for measurement).
  static const bool window_tile = [] {
    const char* v = std::getenv("ORCHID_PREFILL_WINDOW_TILE");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  const int block_n = p.window > 0 && p.window <= 128 && p.group == 8 && window_tile ? kWindowTileKeys
                      : p.window > 0 && p.window <= 256                              ? 64
                                                                                     : 128;
  HopperPrefillMaps m{};
  {
    const uint64_t dims[3] = {uint64_t(kHeadDim), uint64_t(p.num_q_heads), uint64_t(num_token_rows)};
    const uint64_t strides[2] = {uint64_t(kHeadDim) * 2, uint64_t(p.num_q_heads) * kHeadDim * 2};
    const uint32_t box[3] = {uint32_t(kHeadDim), uint32_t(p.group), uint32_t(p.tokens_per_tile)};
    m.q = encode_tensor_map(CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, p.q, dims, strides, box,
                            CU_TENSOR_MAP_SWIZZLE_128B, "prefill attention: q");
  }
  const uint64_t rows = uint64_t(num_pages) * uint64_t(p.num_kv_heads) << p.page_size_log2;
  const uint64_t dims[2] = {uint64_t(kHeadDim), rows};
  const uint64_t strides[1] = {uint64_t(kHeadDim) * 2};
  const uint32_t box[2] = {
      uint32_t(kHeadDim),
      uint32_t(std::min(1 << p.page_size_log2, block_n == kWindowTileKeys ? kWindowBoxRows : block_n))};
  m.k = encode_tensor_map(CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, p.k_pool, dims, strides, box,
                          CU_TENSOR_MAP_SWIZZLE_128B, "prefill attention: the K pool");
  m.v = encode_tensor_map(CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, p.v_pool, dims, strides, box,
                          CU_TENSOR_MAP_SWIZZLE_128B, "prefill attention: the V pool");
  // The window tile's output rows by tensor stores unless the caller says (or ORCHID_PREFILL_TMA_STORE=0):
  // +4-7% on the window line at 32k, +9-13% at 8k (H100, bench/RESULTS.md).
  static const bool tma_store_env = [] {
    const char* v = std::getenv("ORCHID_PREFILL_TMA_STORE");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  if (tma_store < 0) tma_store = tma_store_env ? 1 : 0;
  if (block_n == kWindowTileKeys && tma_store == 1 && p.pieces == nullptr) {
    const uint64_t odims[3] = {uint64_t(kHeadDim), uint64_t(p.num_q_heads), uint64_t(num_token_rows)};
    const uint64_t ostrides[2] = {uint64_t(kHeadDim) * 2, uint64_t(p.num_q_heads) * kHeadDim * 2};
    const uint32_t obox[3] = {uint32_t(kHeadDim), 8, 2};  // a consumer warp's 16 rows
    m.out = encode_tensor_map(CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, p.out, odims, ostrides, obox,
                              CU_TENSOR_MAP_SWIZZLE_128B, "prefill attention: out");
    m.store_by_tma = true;
  }
  if (consumers == 2)
    launch_tile<2>(block_n, p, m, items, ctas, stream);
  else
    launch_tile<3>(block_n, p, m, items, ctas, stream);
}

}  // namespace orchid::kernels::attention::detail
