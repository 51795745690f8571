// The GPU sampler (see sampling.h): one 512-thread block per sampled row, every step a pass over the row.
//
// Napkin math (gpt-oss vocab 201,088 fp32 = 786 KiB per row): a pass reads the row once, from L2 for up to
// ~60 rows in flight and from HBM beyond. Temperature-only sampling takes 3 passes (stats, scan, walk);
// top-k or top-p add a radix select of up to 7 passes each, logprobs a log-sum-exp pass plus a select for
// the top N. Sums of weights are fp64 in a fixed order (warp-private histograms, fixed reduction trees), so a
// row draws the same token on every run.
#include <cuda_runtime.h>

#include <cfloat>
#include <cmath>
#include <mutex>

#include "core/philox.h"
#include "core/sampling_weight.h"
#include "kernels/common/cuda_check.h"
#include "kernels/sampling/sampling.h"

namespace orchid::kernels::sampling {
namespace {

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr int kBins = 256;
constexpr int kIdBits = 20;
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
__device__ __forceinline__ int32_t key_id(uint64_t key) { return int32_t(kIdMask - (key & kIdMask)); }

// Warp-private digit histograms of the radix select (dynamic shared memory).
struct Hist {
  uint32_t count[kWarps][kBins];
  double weight[kWarps][kBins];
  double lane_w[kWarps][32];
};

struct Shared {
  double red_d[kWarps];
  uint64_t red_u[kWarps];
  uint32_t tot_count[kBins];
  double tot_weight[kBins];
  uint64_t prefix;
  double above;
  double warp_base[kWarps + 1];
  int32_t warp_last[kWarps];
  int32_t owner;
  double target;
  int32_t token;
  float raw_logit;
  int32_t n_top;
  uint64_t top_keys[kMaxTopLogprobs];
};

template <class T, class Op>
__device__ T block_reduce(T v, Op op, T* slots) {
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(kFull, v, o));
  if ((threadIdx.x & 31) == 0) slots[threadIdx.x >> 5] = v;
  __syncthreads();
  T r = slots[0];
  for (int w = 1; w < kWarps; ++w) r = op(r, slots[w]);
  __syncthreads();
  return r;
}
struct MaxU64 {
  __device__ uint64_t operator()(uint64_t a, uint64_t b) const { return a > b ? a : b; }
};
struct MinU64 {
  __device__ uint64_t operator()(uint64_t a, uint64_t b) const { return a < b ? a : b; }
};
struct SumD {
  __device__ double operator()(double a, double b) const { return a + b; }
};

__device__ __forceinline__ bool is_candidate_value(float v, bool allow_neg_inf) {
  return v == v && (allow_neg_inf || v != -INFINITY);
}

struct RowStats {
  uint64_t kmax = 0, kmin = ~uint64_t(0);
  uint64_t count = 0;
};

__device__ RowStats row_stats(const float* L, int V, bool allow_neg_inf, Shared& s) {
  uint64_t kmax = 0, kmin = ~uint64_t(0), n = 0;
  for (int i = threadIdx.x; i < V; i += kThreads) {
    const float v = L[i];
    if (!is_candidate_value(v, allow_neg_inf)) continue;
    const uint64_t k = rank_key(v, i);
    kmax = k > kmax ? k : kmax;
    kmin = k < kmin ? k : kmin;
    ++n;
  }
  RowStats r;
  r.kmax = block_reduce(kmax, MaxU64{}, s.red_u);
  r.kmin = block_reduce(kmin, MinU64{}, s.red_u);
  r.count = block_reduce(n, [](uint64_t a, uint64_t b) { return a + b; }, s.red_u);
  return r;
}

// Among the tokens with keys in [lo, hi] (hi: the row's largest key), walking in rank order, the key of the
// first token at which the running total of q (1 per token, or its sampling weight) reaches `target`; the
// smallest such key if the total never reaches it. Called by every thread; returns the same key to all.
template <bool kWeighted>
__device__ uint64_t radix_select(const float* L, int V, bool allow_neg_inf, uint64_t lo, uint64_t hi,
                                 double target, float m, float inv_t, Hist& h, Shared& s) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const uint64_t diff = lo ^ hi;
  if (diff == 0) return hi;
  int top = 63 - __clzll(diff);  // bits above `top` are common to every key in [lo, hi]
  uint64_t prefix = hi & ~((uint64_t(2) << top) - 1);
  double above = 0;  // total q of the tokens ranked before the current bucket
  while (top >= 0) {
    const int shift = top >= 7 ? top - 7 : 0;
    const uint32_t dmask = (2u << (top - shift)) - 1;
    for (int j = tid; j < kWarps * kBins; j += kThreads) {
      (&h.count[0][0])[j] = 0;
      (&h.weight[0][0])[j] = 0;
    }
    __syncthreads();
    for (int base = 0; base < V; base += kThreads) {
      const int i = base + tid;
      int digit = -1;
      double q = 0;
      if (i < V) {
        const float v = L[i];
        if (is_candidate_value(v, allow_neg_inf)) {
          const uint64_t key = rank_key(v, i);
          if (key >= lo && (key >> (top + 1)) == (prefix >> (top + 1))) {
            digit = int((key >> shift) & dmask);
            if (kWeighted) q = double(sampling_weight(v, m, inv_t));
          }
        }
      }
      // One writer per digit and warp, so the warp-private histograms need no atomics. The common case of
      // the high digits, every lane of the warp on the same digit, reduces by shuffles; otherwise each
      // digit's lowest lane sums its peers.
      const unsigned valid = __ballot_sync(kFull, digit >= 0);
      if (valid == 0) continue;
      const unsigned peers = __match_any_sync(kFull, digit);
      if (__all_sync(kFull, digit < 0 || peers == valid)) {
        if (kWeighted)
          for (int o = 16; o > 0; o >>= 1) q += __shfl_xor_sync(kFull, q, o);
        if (lane == __ffs(valid) - 1) {
          h.count[warp][digit] += __popc(valid);
          if (kWeighted) h.weight[warp][digit] += q;
        }
        continue;
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
    __syncthreads();
    for (int d = tid; d < kBins; d += kThreads) {
      uint32_t c = 0;
      double w = 0;
      for (int k = 0; k < kWarps; ++k) {
        c += h.count[k][d];
        w += h.weight[k][d];
      }
      s.tot_count[d] = c;
      s.tot_weight[d] = w;
    }
    __syncthreads();
    if (tid == 0) {
      int chosen = -1, lowest = -1;
      double lowest_q = 0;
      for (int d = int(dmask); d >= 0; --d) {
        if (s.tot_count[d] == 0) continue;
        const double q = kWeighted ? s.tot_weight[d] : double(s.tot_count[d]);
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
    }
    __syncthreads();
    prefix = s.prefix;
    above = s.above;
    top = shift - 1;
  }
  return prefix;
}

__device__ __forceinline__ bool is_candidate(float v, int i, uint64_t floor_key, double min_p, float m,
                                             float inv_t, float* w) {
  if (!is_candidate_value(v, false) || rank_key(v, i) < floor_key) return false;
  *w = sampling_weight(v, m, inv_t);
  return double(*w) >= min_p;
}

// Inverse CDF over the candidates in ascending id order, at u * (their total weight); the last candidate if
// rounding leaves the target past every bucket (as the host does). Warp w owns ids [w * seg, (w + 1) * seg),
// read 32 consecutive ids at a time; the warp whose segment holds the target walks it tile by tile.
__device__ int32_t draw(const float* L, int V, uint64_t floor_key, double min_p, float m, float inv_t, double u,
                        Shared& s) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int seg = ((V + kWarps - 1) / kWarps + 31) / 32 * 32;
  const int begin = min(V, warp * seg), end = min(V, begin + seg);
  double sum = 0;
  int last = -1;
  for (int i = begin + lane; i < end; i += 32) {
    float w;
    if (is_candidate(L[i], i, floor_key, min_p, m, inv_t, &w)) {
      sum += double(w);
      last = i;
    }
  }
  for (int o = 16; o > 0; o >>= 1) {
    sum += __shfl_xor_sync(kFull, sum, o);
    last = max(last, __shfl_xor_sync(kFull, last, o));
  }
  if (lane == 0) {
    s.red_d[warp] = sum;
    s.warp_last[warp] = last;
  }
  __syncthreads();
  if (tid == 0) {
    double acc = 0;
    int owner = -1, last_any = -1;
    for (int w = 0; w < kWarps; ++w) {
      s.warp_base[w] = acc;
      acc += s.red_d[w];
      last_any = max(last_any, s.warp_last[w]);
    }
    const double target = u * acc;
    for (int w = 0; w < kWarps; ++w)
      if (s.red_d[w] > 0 && target >= s.warp_base[w] && (w == kWarps - 1 || target < s.warp_base[w + 1])) owner = w;
    s.owner = owner;
    s.target = target;
    s.token = last_any;
  }
  __syncthreads();
  if (warp == s.owner) {
    const double r = s.target - s.warp_base[warp];
    double cum = 0;
    int32_t pick = s.warp_last[warp];
    for (int t = begin; t < end; t += 32) {
      const int i = t + lane;
      float w = 0;
      double x = (i < end && is_candidate(L[i], i, floor_key, min_p, m, inv_t, &w)) ? double(w) : 0.0;
      for (int o = 1; o < 32; o <<= 1) {  // inclusive scan of the tile
        const double y = __shfl_up_sync(kFull, x, o);
        if (lane >= o) x += y;
      }
      const unsigned hit = __ballot_sync(kFull, r < cum + x);
      if (hit != 0) {
        pick = t + __ffs(hit) - 1;
        break;
      }
      cum += __shfl_sync(kFull, x, 31);
    }
    if (lane == 0) s.token = pick;
  }
  __syncthreads();
  const int32_t token = s.token;
  __syncthreads();
  return token;
}

__global__ void __launch_bounds__(kThreads, 1) sample_rows_kernel(SampleArgs a) {
  extern __shared__ __align__(16) unsigned char dyn[];
  Hist& h = *reinterpret_cast<Hist*>(dyn);
  __shared__ Shared s;
  const int tid = threadIdx.x;
  const RowParams P = a.params[blockIdx.x];
  const int V = int(a.vocab);
  float* L = a.logits + int64_t(P.logits_row) * a.vocab;
  RowResult& out = a.out[blockIdx.x];

  // 1. Logprobs of the raw logits: log-sum-exp and the N most likely tokens.
  double lse = 0;
  if (P.num_logprobs >= 0) {
    const RowStats raw = row_stats(L, V, true, s);
    const float m = raw.count ? key_logit(raw.kmax) : -INFINITY;
    double sum = 0;
    // expf (2 ulp) summed in fp64: within 1e-7 of the host's fp64 exp, at a fraction of its cost.
    for (int i = tid; i < V; i += kThreads) sum += double(expf(L[i] - m));
    lse = double(m) + log(block_reduce(sum, SumD{}, s.red_d));
    const int n = int(uint64_t(P.num_logprobs) < raw.count ? uint64_t(P.num_logprobs) : raw.count);
    if (n > 0) {
      const uint64_t kn = radix_select<false>(L, V, true, raw.kmin, raw.kmax, double(n), 0.f, 0.f, h, s);
      if (tid == 0) s.n_top = 0;
      __syncthreads();
      for (int i = tid; i < V; i += kThreads) {
        const float v = L[i];
        if (!is_candidate_value(v, true)) continue;
        const uint64_t k = rank_key(v, i);
        if (k >= kn) s.top_keys[atomicAdd(&s.n_top, 1)] = k;
      }
      __syncthreads();
      if (tid == 0) {
        for (int x = 1; x < n; ++x)  // insertion sort, largest key first
          for (int y = x; y > 0 && s.top_keys[y] > s.top_keys[y - 1]; --y) {
            const uint64_t t = s.top_keys[y];
            s.top_keys[y] = s.top_keys[y - 1];
            s.top_keys[y - 1] = t;
          }
        for (int x = 0; x < n; ++x) {
          out.top_ids[x] = key_id(s.top_keys[x]);
          out.top_logprobs[x] = float(double(key_logit(s.top_keys[x])) - lse);
        }
        out.num_top = n;
      }
    } else if (tid == 0) {
      out.num_top = 0;
    }
  } else if (tid == 0) {
    out.num_top = 0;
  }

  // 2. Penalties (each history id once), then banned tokens, in place. The raw logit of each penalized id is
  //    kept next to its first-claiming history slot for the sampled token's logprob.
  if (P.penalties) {
    int32_t* scr = a.penalty_scratch + int64_t(blockIdx.x) * a.vocab;
    for (int j = tid; j < P.prompt_len; j += kThreads) atomicOr(&scr[a.history[P.prompt_begin + j]], 1);
    for (int j = tid; j < P.output_len; j += kThreads) atomicAdd(&scr[a.history[P.output_begin + j]], 2);
    __syncthreads();
    for (int j = tid; j < P.prompt_len + P.output_len; j += kThreads) {
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
    __syncthreads();
  }
  for (int j = tid; j < P.num_banned; j += kThreads) L[a.banned[P.banned_begin + j]] = -INFINITY;
  __syncthreads();

  // 3. The draw.
  const RowStats st = row_stats(L, V, false, s);
  int32_t token = -1;
  if (st.count == 0) {
    token = -1;
  } else if (P.greedy) {
    token = key_id(st.kmax);
  } else {
    const float m = key_logit(st.kmax);
    const float inv_t = 1.0f / P.temperature;
    uint64_t floor_key = st.kmin;
    if (P.top_k > 0 && uint64_t(P.top_k) < st.count)
      floor_key = radix_select<false>(L, V, false, st.kmin, st.kmax, double(P.top_k), m, inv_t, h, s);
    if (P.top_p < 1.0f) {
      double z = 0;
      for (int i = tid; i < V; i += kThreads) {
        const float v = L[i];
        if (is_candidate_value(v, false) && rank_key(v, i) >= floor_key) z += double(sampling_weight(v, m, inv_t));
      }
      z = block_reduce(z, SumD{}, s.red_d);
      floor_key = radix_select<true>(L, V, false, floor_key, st.kmax, double(P.top_p) * z, m, inv_t, h, s);
    }
    const double min_p = P.min_p > 0.0f ? double(P.min_p) : 0.0;
    token = draw(L, V, floor_key, min_p, m, inv_t, sampling_uniform(P.seed, uint32_t(P.sample_index)), s);
  }

  // 4. The sampled token's logprob, from its raw logit.
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

}  // namespace

size_t penalty_scratch_bytes(int64_t rows, int64_t vocab) {
  return size_t(rows) * size_t(vocab) * sizeof(int32_t);
}

void sample_rows(const SampleArgs& a, cudaStream_t stream) {
  if (a.rows == 0) return;
  ORCHID_KERNEL_REQUIRE(a.vocab > 0 && a.vocab < (int64_t(1) << kIdBits), "sample_rows: vocab must be in [1, 2^20)");
  static std::once_flag attr;
  std::call_once(attr, [] {
    ORCHID_CUDA_CHECK(cudaFuncSetAttribute(sample_rows_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           int(sizeof(Hist))));
  });
  sample_rows_kernel<<<unsigned(a.rows), kThreads, sizeof(Hist), stream>>>(a);
  ORCHID_CUDA_CHECK_LAUNCH();
}

}  // namespace orchid::kernels::sampling
