// The GPU sampler (see sampling.h): a cluster of 1 to 8 blocks of 512 threads per sampled row (more blocks
// when the batch is small), every step a pass over the row with 16 logits in flight per thread.
//
// Napkin math (gpt-oss vocab 201,088 fp32 = 786 KiB per row; 256 rows = 206 MB, 49 us at 4.17 TB/s per pass):
// temperature / min-p sampling takes three passes (stats, tile sums, walk of one segment), so ~150 us at 256
// rows is the floor; measured 333 us (bench/RESULTS.md). A radix select (top-k, top-p, the top-N logprobs)
// adds up to 7 passes of 8 bits; the first 2-3 read the row, with a warp-collective histogram update per
// logit that makes them compute-bound, the rest read the few hundred survivors gathered into shared memory.
// Sums of weights are fp64 in a fixed order (warp-private histograms, fixed reduction trees), so a row draws
// the same token on every run.
#include <cuda_runtime.h>

#include <cfloat>
#include <cmath>
#include <mutex>

#include <cooperative_groups.h>

#include "core/philox.h"
#include "core/sampling_weight.h"
#include "kernels/common/cuda_check.h"
#include "kernels/common/device_info.h"
#include "kernels/common/smem_attribute.h"
#include "kernels/sampling/sampling.h"

namespace orchid::kernels::sampling {
namespace {

namespace cg = cooperative_groups;

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr int kBins = 256;
constexpr int kIdBits = 20;
constexpr int kMaxCluster = 8;
constexpr uint64_t kIdMask = (uint64_t(1) << kIdBits) - 1;
constexpr unsigned kFull = 0xffffffffu;

// Rank key: larger first; the logit as an order-preserving integer (-0 folded into +0, as the host's `>`
// sees them equal), then the inverted id so that equal logits rank the lower id first.
__device__ __forceinline__ uint64_t rank_key(float v, int32_t id) {
  uint32_t u = __float_as_uint(__fadd_rn(v, 0.0f));
  u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  return (uint64_t(u) << kIdBits) | (kIdMask - uint64_t(id));
}
__device__ __forceinline__ float key_logit(uint64_t key) {
  const uint32_t u = uint32_t(key >> kIdBits);
  return __uint_as_float((u & 0x80000000u) ? (u & 0x7fffffffu) : ~u);
}
__device__ __forceinline__ int32_t key_id(uint64_t key) {
  return int32_t(kIdMask - (key & kIdMask));
}

__device__ __forceinline__ bool is_candidate_value(float v, bool allow_neg_inf) {
  return v == v && (allow_neg_inf || v != -INFINITY);
}

// Warp-private digit histograms of the radix select (dynamic shared memory).
struct Hist {
  uint32_t count[kWarps][kBins];
  double weight[kWarps][kBins];
  double lane_w[kWarps][32];
};

// Per-warp lists of the tokens left in the radix select's bucket (dynamic shared memory, after Hist).
constexpr int kListCap = 128;                      // entries per warp
constexpr int kGatherMax = kListCap * kWarps / 4;  // gather when the cluster's bucket holds at most this many
struct Lists {
  uint64_t key[kWarps][kListCap];
  double w[kWarps][kListCap];
  int32_t n[kWarps];
};

struct RowStats {
  uint64_t kmax, kmin, count;
};

// What one block of the cluster publishes to the others (read through distributed shared memory).
struct Published {
  RowStats stats;
  double sum;
  uint32_t tot_count[kBins];
  double tot_weight[kBins];
  double warp_sum[kWarps];
  int32_t warp_last[kWarps];
  int32_t n_top;
  uint64_t top_keys[kMaxTopLogprobs];
  int32_t overflow;
};

struct Shared {
  Published pub;
  double red_d[kWarps];
  uint64_t red_u[kWarps][3];
  uint32_t cl_count[kBins];
  double cl_weight[kBins];
  RowStats stats;
  double sum;
  uint64_t prefix;
  double above;
  uint32_t chosen_count;
  int32_t overflow;
  int32_t owner;  // global warp index (rank * kWarps + warp) that walks to the drawn token, or -1
  double owner_r;
  int32_t token;
  float raw_logit;
};

// The row's blocks: a cluster of `n` blocks (1 to kMaxCluster), block `rank` reading ids [lo, hi).
struct Row {
  cg::cluster_group cluster;
  int rank, n, lo, hi, V;
  float* L;
  bool vec;  // 16-byte loads: rows are 16-byte aligned (vocab % 4 == 0)
  __device__ void sync() const { cluster.sync(); }
  template <class T>
  __device__ T* remote(T* local, int r) const {
    return cluster.map_shared_rank(local, r);
  }
};

// Four consecutive logits from i (0 past `end`): one 16-byte load when the row allows it.
__device__ __forceinline__ float4 load4(const float* L, int i, int end, bool vec) {
  if (vec && i + 3 < end) return *reinterpret_cast<const float4*>(L + i);
  float4 r;
  r.x = i < end ? L[i] : 0.0f;
  r.y = i + 1 < end ? L[i + 1] : 0.0f;
  r.z = i + 2 < end ? L[i + 2] : 0.0f;
  r.w = i + 3 < end ? L[i + 3] : 0.0f;
  return r;
}

// Calls f(v, i, in_range) for this block's ids, 16 logits (four 16-byte loads) in flight per thread, which
// is what it takes to keep enough bytes in flight for HBM; every thread makes the same number of calls, so f
// may hold warp-collective code.
template <class F>
__device__ __forceinline__ void for_block_ids(const Row& row, F&& f) {
  for (int base = row.lo + 4 * int(threadIdx.x); base - 4 * int(threadIdx.x) < row.hi;
       base += 16 * kThreads) {
    float4 v[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) v[j] = load4(row.L, base + 4 * j * kThreads, row.hi, row.vec);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int i = base + 4 * j * kThreads;
      f(v[j].x, i, i < row.hi);
      f(v[j].y, i + 1, i + 1 < row.hi);
      f(v[j].z, i + 2, i + 2 < row.hi);
      f(v[j].w, i + 3, i + 3 < row.hi);
    }
  }
}

template <class T, class Op>
__device__ T warp_reduce(T v, Op op) {
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(kFull, v, o));
  return v;
}
struct MaxU64 {
  __device__ uint64_t operator()(uint64_t a, uint64_t b) const { return a > b ? a : b; }
};
struct MinU64 {
  __device__ uint64_t operator()(uint64_t a, uint64_t b) const { return a < b ? a : b; }
};
struct AddU64 {
  __device__ uint64_t operator()(uint64_t a, uint64_t b) const { return a + b; }
};
struct AddD {
  __device__ double operator()(double a, double b) const { return a + b; }
};

// Largest and smallest key and the count of the row's tokens (finite, or also -inf), over the cluster.
__device__ RowStats row_stats(const Row& row, bool allow_neg_inf, Shared& s) {
  uint64_t kmax = 0, kmin = ~uint64_t(0), n = 0;
  for_block_ids(row, [&](float v, int i, bool in) {
    if (!in || !is_candidate_value(v, allow_neg_inf)) return;
    const uint64_t k = rank_key(v, i);
    kmax = k > kmax ? k : kmax;
    kmin = k < kmin ? k : kmin;
    ++n;
  });
  kmax = warp_reduce(kmax, MaxU64{});
  kmin = warp_reduce(kmin, MinU64{});
  n = warp_reduce(n, AddU64{});
  const int warp = threadIdx.x >> 5;
  if ((threadIdx.x & 31) == 0) {
    s.red_u[warp][0] = kmax;
    s.red_u[warp][1] = kmin;
    s.red_u[warp][2] = n;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    RowStats r{0, ~uint64_t(0), 0};
    for (int w = 0; w < kWarps; ++w) {
      r.kmax = MaxU64{}(r.kmax, s.red_u[w][0]);
      r.kmin = MinU64{}(r.kmin, s.red_u[w][1]);
      r.count += s.red_u[w][2];
    }
    s.pub.stats = r;
  }
  row.sync();
  if (threadIdx.x == 0) {
    RowStats r{0, ~uint64_t(0), 0};
    for (int b = 0; b < row.n; ++b) {
      const RowStats o = row.remote(&s.pub, b)->stats;
      r.kmax = MaxU64{}(r.kmax, o.kmax);
      r.kmin = MinU64{}(r.kmin, o.kmin);
      r.count += o.count;
    }
    s.stats = r;
  }
  row.sync();  // every block has read every other's stats
  return s.stats;
}

// A sum over the cluster, in a fixed order (threads, warps, blocks), so every run adds alike.
__device__ double row_sum(const Row& row, double v, Shared& s) {
  v = warp_reduce(v, AddD{});
  if ((threadIdx.x & 31) == 0) s.red_d[threadIdx.x >> 5] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    double t = 0;
    for (int w = 0; w < kWarps; ++w) t += s.red_d[w];
    s.pub.sum = t;
  }
  row.sync();
  if (threadIdx.x == 0) {
    double t = 0;
    for (int b = 0; b < row.n; ++b) t += row.remote(&s.pub, b)->sum;
    s.sum = t;
  }
  row.sync();
  return s.sum;
}

// Adds (digit, q) of every lane to the warp's private histogram; digit < 0: nothing. Warp-collective. One
// writer per digit and warp, so no atomics. The common case of the high digits, every lane on the same
// digit, reduces by shuffles; otherwise each digit's lowest lane sums its peers in lane order.
template <bool kWeighted>
__device__ __forceinline__ void hist_add(Hist& h, int warp, int lane, int digit, double q) {
  const unsigned valid = __ballot_sync(kFull, digit >= 0);
  if (valid == 0) return;
  if (digit < 0) q = 0.0;
  const unsigned peers = __match_any_sync(kFull, digit);
  if (__all_sync(kFull, digit < 0 || peers == valid)) {
    if (kWeighted) q = warp_reduce(q, AddD{});
    if (lane == __ffs(valid) - 1) {
      h.count[warp][digit] += __popc(valid);
      if (kWeighted) h.weight[warp][digit] += q;
    }
    __syncwarp();  // orders this write before another lane's update of the same bin
    return;
  }
  if (kWeighted) h.lane_w[warp][lane] = q;
  __syncwarp();
  if (digit >= 0 && lane == __ffs(peers) - 1) {
    h.count[warp][digit] += __popc(peers);
    if (kWeighted) {
      double w = 0;
      for (unsigned p = peers; p != 0; p &= p - 1) w += h.lane_w[warp][__ffs(p) - 1];
      h.weight[warp][digit] += w;
    }
  }
  __syncwarp();
}

// Among the tokens with keys in [lo, hi] (hi: the row's largest key), walking in rank order, the key of the
// first token at which the running total of q (1 per token, or its sampling weight) reaches `target`; the
// smallest such key if the total never reaches it. Every thread of the cluster gets the same key.
//
// Each pass reads the row and histograms the next 8-bit digit of the keys still in the chosen bucket. Once
// that bucket holds at most kGatherMax tokens over the cluster, the next pass also copies them (key and
// weight) into per-warp lists in shared memory, in the order the warp meets them, and the remaining passes
// read only the lists. Per-warp lists keep every sum in a fixed order, so the result never depends on timing.
template <bool kWeighted>
__device__ uint64_t radix_select(const Row& row, bool allow_neg_inf, uint64_t lo, uint64_t hi, double target,
                                 float m, float inv_t, Hist& h, Lists& lists, Shared& s) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const uint64_t diff = lo ^ hi;
  if (diff == 0) return hi;
  int top = 63 - __clzll(diff);  // bits above `top` are common to every key in [lo, hi]
  uint64_t prefix = hi & ~((uint64_t(2) << top) - 1);
  double above = 0;  // total q of the tokens ranked before the current bucket
  bool gather = false, listed = false;
  while (top >= 0) {
    const int shift = top >= 7 ? top - 7 : 0;
    const uint32_t dmask = (2u << (top - shift)) - 1;
    for (int j = tid; j < kWarps * kBins; j += kThreads) {
      (&h.count[0][0])[j] = 0;
      (&h.weight[0][0])[j] = 0;
    }
    if (tid == 0) s.pub.overflow = 0;
    __syncthreads();
    auto digit_of = [&](uint64_t key) {
      return key >= lo && (key >> (top + 1)) == (prefix >> (top + 1)) ? int((key >> shift) & dmask) : -1;
    };
    if (listed) {
      const int n = lists.n[warp];
      for (int j = lane; j < (n + 31) / 32 * 32; j += 32) {
        const bool in = j < n;
        const int digit = in ? digit_of(lists.key[warp][j]) : -1;
        hist_add<kWeighted>(h, warp, lane, digit, in && kWeighted ? lists.w[warp][j] : 0.0);
      }
    } else {
      int n = 0;  // this warp's list length, the same in every lane
      for_block_ids(row, [&](float v, int i, bool in) {
        int digit = -1;
        double q = 0;
        uint64_t key = 0;
        if (in && is_candidate_value(v, allow_neg_inf)) {
          key = rank_key(v, i);
          digit = digit_of(key);
          if (kWeighted && digit >= 0) q = double(sampling_weight(v, m, inv_t));
        }
        if (gather) {
          const unsigned hits = __ballot_sync(kFull, digit >= 0);
          const int at = n + __popc(hits & ((1u << lane) - 1));
          if (digit >= 0 && at < kListCap) {
            lists.key[warp][at] = key;
            lists.w[warp][at] = q;
          }
          n += __popc(hits);
        }
        hist_add<kWeighted>(h, warp, lane, digit, q);
      });
      if (gather) {
        if (lane == 0) lists.n[warp] = n;
        if (lane == 0 && n > kListCap) atomicOr(&s.pub.overflow, 1);
      }
    }
    __syncthreads();
    for (int d = tid; d < kBins; d += kThreads) {
      uint32_t c = 0;
      double w = 0;
      for (int k = 0; k < kWarps; ++k) {
        c += h.count[k][d];
        w += h.weight[k][d];
      }
      s.pub.tot_count[d] = c;
      s.pub.tot_weight[d] = w;
    }
    row.sync();
    for (int d = tid; d < kBins; d += kThreads) {
      uint32_t c = 0;
      double w = 0;
      for (int b = 0; b < row.n; ++b) {
        const Published* o = row.remote(&s.pub, b);
        c += o->tot_count[d];
        w += o->tot_weight[d];
      }
      s.cl_count[d] = c;
      s.cl_weight[d] = w;
    }
    if (tid == 0) {
      int overflow = 0;
      for (int b = 0; b < row.n; ++b) overflow |= row.remote(&s.pub, b)->overflow;
      s.overflow = overflow;
    }
    row.sync();  // every block has read every other's histogram
    if (tid == 0) {
      int chosen = -1, lowest = -1;
      double lowest_q = 0;
      for (int d = int(dmask); d >= 0; --d) {
        if (s.cl_count[d] == 0) continue;
        const double q = kWeighted ? s.cl_weight[d] : double(s.cl_count[d]);
        lowest = d;
        lowest_q = q;
        if (above + q >= target) {
          chosen = d;
          break;
        }
        above += q;
      }
      if (chosen < 0) {  // never reached: descend into the last bucket, keeping everything
        chosen = lowest;
        above -= lowest_q;
      }
      s.prefix = prefix | (uint64_t(chosen) << shift);
      s.above = above;
      s.chosen_count = s.cl_count[chosen];
    }
    __syncthreads();
    prefix = s.prefix;
    above = s.above;
    top = shift - 1;
    if (gather) listed = s.overflow == 0;  // the same in every block
    gather = !listed && s.chosen_count <= kGatherMax;
  }
  return prefix;
}

__device__ __forceinline__ double candidate_weight(float v, int i, uint64_t floor_key, double min_p, float m,
                                                   float inv_t) {
  if (!is_candidate_value(v, false) || rank_key(v, i) < floor_key) return 0.0;
  const double w = double(sampling_weight(v, m, inv_t));
  return w >= min_p ? w : 0.0;
}

// Inverse CDF over the candidates in ascending id order, at u * (their total weight); the last candidate if
// rounding leaves the target past every bucket (as the host does). Global warp g (rank * kWarps + warp) sums
// ids [g * seg, (g + 1) * seg); every block finds the warp whose segment holds the target; that warp's block
// sums the segment's 128-id tiles (one per warp at a time), warp 0 finds the tile by a scan of the tile sums,
// and the lane holding the target walks its four ids. Returns the token in the block that decided it (the
// owner's, or rank 0 when the fallback applies) and -2 elsewhere.
__device__ int32_t draw(const Row& row, uint64_t floor_key, double min_p, float m, float inv_t, double u,
                        Hist& h, Shared& s) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = row.rank * kWarps + warp, nwarps = row.n * kWarps;
  const int seg = ((row.V + nwarps - 1) / nwarps + 127) / 128 * 128;
  auto weights4 = [&](int i, int end, double w[4]) {
    const float4 v = load4(row.L, i, end, row.vec);
    const float f[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int c = 0; c < 4; ++c)
      w[c] = i + c < end ? candidate_weight(f[c], i + c, floor_key, min_p, m, inv_t) : 0.0;
  };
  {
    const int begin = min(row.V, g * seg), end = min(row.V, begin + seg);
    double sum = 0;
    int last = -1;
    for (int t = begin; t < end; t += 4 * 128) {
      double w[4][4];
#pragma unroll
      for (int j = 0; j < 4; ++j) weights4(t + 128 * j + 4 * lane, end, w[j]);
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int c = 0; c < 4; ++c)
          if (w[j][c] > 0) {
            sum += w[j][c];
            last = t + 128 * j + 4 * lane + c;
          }
    }
    sum = warp_reduce(sum, AddD{});
    last = warp_reduce(last, [](int x, int y) { return x > y ? x : y; });
    if (lane == 0) {
      s.pub.warp_sum[warp] = sum;
      s.pub.warp_last[warp] = last;
    }
  }
  row.sync();
  if (tid == 0) {  // every block finds the same owner from the same sums
    double acc = 0, owner_base = 0;
    int owner = -1, last_any = -1, owner_last = -1;
    for (int b = 0; b < row.n; ++b) {
      const Published* o = row.remote(&s.pub, b);
      for (int w = 0; w < kWarps; ++w) {
        last_any = max(last_any, o->warp_last[w]);
        acc += o->warp_sum[w];
      }
    }
    const double target = u * acc;
    acc = 0;
    for (int b = 0; b < row.n && owner < 0; ++b) {
      const Published* o = row.remote(&s.pub, b);
      for (int w = 0; w < kWarps; ++w) {
        const double next = acc + o->warp_sum[w];
        if (o->warp_sum[w] > 0 && target >= acc && target < next) {
          owner = b * kWarps + w;
          owner_base = acc;
          owner_last = o->warp_last[w];
          break;
        }
        acc = next;
      }
    }
    s.owner = owner;
    s.owner_r = target - owner_base;
    s.token = owner < 0 ? (row.rank == 0 ? last_any : -2) : (owner / kWarps == row.rank ? owner_last : -2);
  }
  row.sync();  // every block has read every other's sums
  if (s.owner < 0 || s.owner / kWarps != row.rank) return s.token;

  // The owner's block: tile sums of the owner segment, then the tile, then the id.
  const int begin = min(row.V, s.owner * seg), end = min(row.V, begin + seg);
  const int ntiles = (end - begin + 127) / 128;
  double* tile_sum = &h.weight[0][0];  // the histograms are idle now
  for (int t = warp; t < ntiles; t += kWarps) {
    double w[4];
    weights4(begin + 128 * t + 4 * lane, end, w);
    const double x = warp_reduce(w[0] + w[1] + w[2] + w[3], AddD{});
    if (lane == 0) tile_sum[t] = x;
  }
  __syncthreads();
  if (warp == 0) {
    const double r = s.owner_r;
    double cum = 0;
    for (int c = 0; c < ntiles; c += 32) {
      const double own = c + lane < ntiles ? tile_sum[c + lane] : 0.0;
      double x = own;
      for (int o = 1; o < 32; o <<= 1) {
        const double y = __shfl_up_sync(kFull, x, o);
        if (lane >= o) x += y;
      }
      const unsigned hit = __ballot_sync(kFull, r < cum + x);
      if (hit != 0) {
        const int src = __ffs(hit) - 1;
        const int tile = c + src;
        const double before = cum + __shfl_sync(kFull, x - own, src);  // sum of the tiles before it
        double w[4];
        weights4(begin + 128 * tile + 4 * lane, end, w);
        const double mine = w[0] + w[1] + w[2] + w[3];
        double y = mine;
        for (int o = 1; o < 32; o <<= 1) {
          const double z = __shfl_up_sync(kFull, y, o);
          if (lane >= o) y += z;
        }
        const double rr = r - before;
        const unsigned lh = __ballot_sync(kFull, rr < y);
        if (lh != 0 && lane == __ffs(lh) - 1) {
          double acc = y - mine;
          int pick = -1;
          for (int k = 0; k < 4; ++k) {
            if (w[k] > 0) pick = begin + 128 * tile + 4 * lane + k;
            acc += w[k];
            if (w[k] > 0 && rr < acc) break;
          }
          if (pick >= 0) s.token = pick;
        }
        break;
      }
      cum += __shfl_sync(kFull, x, 31);
    }
  }
  __syncthreads();
  return s.token;
}

__global__ void __launch_bounds__(kThreads, 1) sample_rows_kernel(SampleArgs a) {
  extern __shared__ __align__(16) unsigned char dyn[];
  Hist& h = *reinterpret_cast<Hist*>(dyn);
  Lists& lists = *reinterpret_cast<Lists*>(dyn + sizeof(Hist));
  __shared__ Shared s;
  const int tid = threadIdx.x;
  Row row{cg::this_cluster(), 0, 1, 0, 0, int(a.vocab), nullptr, false};
  row.rank = int(row.cluster.block_rank());
  row.n = int(row.cluster.num_blocks());
  const int row_index = int(blockIdx.x) / row.n;
  const int part = ((row.V + row.n - 1) / row.n + 3) / 4 * 4;
  row.lo = min(row.V, row.rank * part);
  row.hi = min(row.V, row.lo + part);
  const RowParams P = a.params[row_index];
  row.L = a.logits + int64_t(P.logits_row) * a.vocab;
  row.vec = (a.vocab % 4) == 0 && (reinterpret_cast<uintptr_t>(a.logits) % 16) == 0;
  float* L = row.L;
  RowResult& out = a.out[row_index];
  const int gtid = row.rank * kThreads + tid, gthreads = row.n * kThreads;

  // 0. The allowed-token mask (structured outputs): every token it leaves out is -inf from here on, in the
  //    logprobs too. Each block masks its own part of the row, then the cluster syncs (later steps read
  //    other parts).
  if (P.mask_row >= 0) {
    const uint32_t* mask = a.token_masks + int64_t(P.mask_row) * a.mask_words;
    for (int j = row.lo + tid; j < row.hi; j += kThreads)
      if (!((mask[j >> 5] >> (j & 31)) & 1u)) L[j] = -INFINITY;
    __threadfence();
    row.sync();
  }

  // 1. Logprobs of the raw logits: log-sum-exp and the N most likely tokens (a masked row lists only tokens
  //    that can be drawn, never its -inf ones).
  const bool list_neg_inf = P.mask_row < 0;
  double lse = 0;
  int n_top = 0;
  if (P.num_logprobs >= 0) {
    const RowStats raw = row_stats(row, list_neg_inf, s);
    const float m = raw.count ? key_logit(raw.kmax) : -INFINITY;
    double sum = 0;
    // expf (2 ulp) summed in fp64: within 1e-7 of the host's fp64 exp, at a fraction of its cost.
    for_block_ids(row, [&](float v, int, bool in) {
      if (in) sum += double(expf(v - m));
    });
    lse = double(m) + log(row_sum(row, sum, s));
    n_top = int(uint64_t(P.num_logprobs) < raw.count ? uint64_t(P.num_logprobs) : raw.count);
    if (n_top > 0) {
      const uint64_t kn =
          radix_select<false>(row, list_neg_inf, raw.kmin, raw.kmax, double(n_top), 0.f, 0.f, h, lists, s);
      if (tid == 0) s.pub.n_top = 0;
      __syncthreads();
      for_block_ids(row, [&](float v, int i, bool in) {
        if (!in || !is_candidate_value(v, list_neg_inf)) return;
        const uint64_t k = rank_key(v, i);
        if (k >= kn) s.pub.top_keys[atomicAdd(&s.pub.n_top, 1)] = k;
      });
      row.sync();
      if (row.rank == 0 && tid == 0) {
        uint64_t keys[kMaxTopLogprobs];
        int n = 0;
        for (int b = 0; b < row.n; ++b) {
          const Published* o = row.remote(&s.pub, b);
          for (int x = 0; x < o->n_top; ++x) keys[n++] = o->top_keys[x];
        }
        for (int x = 1; x < n; ++x)  // insertion sort, largest key first
          for (int y = x; y > 0 && keys[y] > keys[y - 1]; --y) {
            const uint64_t t = keys[y];
            keys[y] = keys[y - 1];
            keys[y - 1] = t;
          }
        for (int x = 0; x < n; ++x) {
          out.top_ids[x] = key_id(keys[x]);
          out.top_logprobs[x] = float(double(key_logit(keys[x])) - lse);
        }
      }
      row.sync();  // rank 0 has read every block's keys
    }
  }
  if (row.rank == 0 && tid == 0) out.num_top = n_top;

  // 2. Penalties (each history id once), then banned tokens, in place, spread over the cluster. The raw logit
  //    of each penalized id is kept next to its first-claiming history slot, for the sampled token's logprob.
  if (P.penalties) {
    int32_t* scr = a.penalty_scratch + int64_t(row_index) * a.vocab;
    for (int j = gtid; j < P.prompt_len; j += gthreads) atomicOr(&scr[a.history[P.prompt_begin + j]], 1);
    for (int j = gtid; j < P.output_len; j += gthreads) atomicAdd(&scr[a.history[P.output_begin + j]], 2);
    __threadfence();
    row.sync();
    for (int j = gtid; j < P.prompt_len + P.output_len; j += gthreads) {
      const int32_t pos = j < P.prompt_len ? P.prompt_begin + j : P.output_begin + (j - P.prompt_len);
      const int32_t id = a.history[pos];
      const int32_t mark = atomicExch(&scr[id], 0);  // leaves the scratch zero, as it was
      if (mark == 0) {
        a.history_raw[pos] = NAN;
        continue;
      }
      const float raw = L[id];
      float v = raw;
      if (P.repetition_penalty != 1.0f)
        v = v > 0.0f ? __fdiv_rn(v, P.repetition_penalty) : __fmul_rn(v, P.repetition_penalty);
      const int32_t count = mark >> 1;
      if (count > 0 && (P.frequency_penalty != 0.0f || P.presence_penalty != 0.0f))
        v = __fsub_rn(v, __fadd_rn(__fmul_rn(float(count), P.frequency_penalty), P.presence_penalty));
      L[id] = v;
      a.history_raw[pos] = raw;
    }
    __threadfence();
    row.sync();
  }
  if (P.num_banned > 0) {
    for (int j = gtid; j < P.num_banned; j += gthreads) L[a.banned[P.banned_begin + j]] = -INFINITY;
    __threadfence();
    row.sync();
  }

  // 3. The draw.
  const RowStats st = row_stats(row, false, s);
  int32_t token = -2;  // -2: decided in another block of the cluster
  if (st.count == 0) {
    token = row.rank == 0 ? -1 : -2;
  } else if (P.greedy) {
    token = row.rank == 0 ? key_id(st.kmax) : -2;
  } else {
    const float m = key_logit(st.kmax);
    const float inv_t = 1.0f / P.temperature;
    uint64_t floor_key = st.kmin;
    if (P.top_k > 0 && uint64_t(P.top_k) < st.count)
      floor_key = radix_select<false>(row, false, st.kmin, st.kmax, double(P.top_k), m, inv_t, h, lists, s);
    if (P.top_p < 1.0f) {
      double z = 0;
      for_block_ids(row, [&](float v, int i, bool in) {
        if (in && is_candidate_value(v, false) && rank_key(v, i) >= floor_key)
          z += double(sampling_weight(v, m, inv_t));
      });
      z = row_sum(row, z, s);
      floor_key =
          radix_select<true>(row, false, floor_key, st.kmax, double(P.top_p) * z, m, inv_t, h, lists, s);
    }
    const double min_p = P.min_p > 0.0f ? double(P.min_p) : 0.0;
    token = draw(row, floor_key, min_p, m, inv_t, sampling_uniform(P.seed, uint32_t(P.sample_index)), h, s);
  }

  // 4. The deciding block writes the token and its logprob, from its raw logit.
  if (token != -2) {
    if (P.num_logprobs >= 0 && token >= 0) {
      if (tid == 0) s.raw_logit = L[token];
      __syncthreads();
      if (P.penalties)
        for (int j = tid; j < P.prompt_len + P.output_len; j += kThreads) {
          const int32_t pos = j < P.prompt_len ? P.prompt_begin + j : P.output_begin + (j - P.prompt_len);
          if (a.history[pos] == token && !isnan(a.history_raw[pos])) s.raw_logit = a.history_raw[pos];
        }
      __syncthreads();
      if (tid == 0) out.logprob = float(double(s.raw_logit) - lse);
    } else if (tid == 0) {
      out.logprob = 0.0f;
    }
    if (tid == 0) out.token = token;
  }
  row.sync();  // no block leaves while another may still read its shared memory
}

struct SampleRowsTag {};

}  // namespace

size_t penalty_scratch_bytes(int64_t rows, int64_t vocab) {
  return size_t(rows) * size_t(vocab) * sizeof(int32_t);
}

void sample_rows(const SampleArgs& a, cudaStream_t stream) {
  if (a.rows == 0) return;
  ORCHID_KERNEL_REQUIRE(a.vocab > 0 && a.vocab < (int64_t(1) << kIdBits),
                        "sample_rows: vocab must be in [1, 2^20)");
  // Per device: a process driving several GPUs sets the attribute on each (device_info is per device too).
  ensure_dynamic_smem<SampleRowsTag>(sample_rows_kernel, int(sizeof(Hist) + sizeof(Lists)));
  const int sms = device_info().sm_count;
  // Blocks per row: as many as keep every SM busy, up to a portable cluster of 8 (a small batch spreads each
  // row over several SMs; a large one runs one block per row).
  int cluster = 1;
  while (cluster < kMaxCluster && a.rows * cluster * 2 <= sms) cluster *= 2;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(unsigned(a.rows * cluster));
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = sizeof(Hist) + sizeof(Lists);
  cfg.stream = stream;
  cudaLaunchAttribute attr_cluster[1];
  attr_cluster[0].id = cudaLaunchAttributeClusterDimension;
  attr_cluster[0].val.clusterDim.x = unsigned(cluster);
  attr_cluster[0].val.clusterDim.y = 1;
  attr_cluster[0].val.clusterDim.z = 1;
  cfg.attrs = attr_cluster;
  cfg.numAttrs = 1;
  ORCHID_CUDA_CHECK(cudaLaunchKernelEx(&cfg, sample_rows_kernel, a));
}

}  // namespace orchid::kernels::sampling
