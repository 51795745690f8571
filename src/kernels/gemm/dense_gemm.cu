#include "kernels/gemm/dense_gemm.h"

#include <cublasLt.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "kernels/common/cuda_check.h"
#include "kernels/common/device_info.h"
#include "kernels/gemm/small_m_gemm.h"

#define ORCHID_CUBLAS_CHECK(expr)                                                                 \
  do {                                                                                            \
    cublasStatus_t orchid_st_ = (expr);                                                           \
    if (orchid_st_ != CUBLAS_STATUS_SUCCESS) [[unlikely]]                                         \
      ::orchid::check_failed(__FILE__, __LINE__, #expr,                                           \
                             std::string("cuBLASLt status ") + cublasLt_status_name(orchid_st_)); \
  } while (0)

namespace orchid::kernels {
namespace {

const char* cublasLt_status_name(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR:
      return "MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "NOT_SUPPORTED";
    default:
      return "UNKNOWN";
  }
}

// Used only when the heuristic offers no algorithm with the bias epilogue for a shape.
template <typename T>
__global__ void add_bias_kernel(T* y, int64_t ldy, const T* bias, int m, int n) {
  const int64_t total = int64_t(m) * n;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / n, c = i % n;
    T* p = y + r * ldy + c;
    if constexpr (sizeof(T) == 2) {
      *p = __float2bfloat16_rn(__bfloat162float(*p) + __bfloat162float(bias[c]));
    } else {
      *p = *p + bias[c];
    }
  }
}

using Key = std::tuple<int, int, int, int64_t, int64_t, int, bool>;

// How many of the heuristic's algorithms a shape's first call times (its first is the heuristic's choice).
constexpr int kHeuristicCandidates = 8;
// The heuristic's first with its dot products split this many ways (fp32 partial sums reduced in a second
// step) joins them for shapes that are timed: at a few hundred rows or fewer the output tiles can be too
// few for the SMs (QKV at 256 rows in 128 x 256 tiles: 40 CTAs on 132 SMs; at one row, one tile row), and
// the heuristic seldom offers a split.
constexpr int kSplitK[] = {2, 3, 4, 6};
constexpr int kAlgorithmCandidates = kHeuristicCandidates + int(std::size(kSplitK));
// cuBLASLt's algorithms are timed only for shapes of at most this many rows (inside a TimingScope: the
// decode steps' graph buckets, whose few rows the heuristic serves worst); above, the heuristic already
// runs near the ceiling.
constexpr int kTimedMaxRows = 512;

struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algos[kAlgorithmCandidates]{};  // the heuristic's, best first; then its first split
  int num_algos = 0;
  int chosen = -1;  // index into algos; -1 until the shape's first call decides
  bool bias_epilogue = false;
};

// The choices timed at first use, shared by every DenseGemm of the process on devices of one kind: two
// engines of one process, and the tensor-parallel ranks (which compute the router and other replicated
// GEMMs each on its own GPU and must get the same bits), then run the same kernels for a shape. The first
// to finish timing a shape decides for all. The key holds what changes the heuristic's list (the
// workspace limit among it), so an index means the same algorithm to every instance that finds it.
using DeviceKind = std::tuple<int, int, long long, long long>;  // cc, SMs, L2 and memory bytes
using ChoiceKey = std::tuple<DeviceKind, Key, size_t>;          // + the workspace limit
struct TimedChoices {
  std::mutex mu;
  std::map<ChoiceKey, bool> small_m;   // true when small_m_gemm won
  std::map<ChoiceKey, int> algorithm;  // index into the heuristic's list
};

thread_local bool t_timing_allowed = false;  // inside a DenseGemm::TimingScope on this thread

// Without a timing (outside a TimingScope, inside a graph capture, or where a timing run would change y:
// accumulate), a small-m shape no instance has timed takes small_m_gemm, and a cuBLASLt one the heuristic's
// first algorithm, without recording either: the first timed call decides.
constexpr bool kUntimedSmallM = true;

// Shapes of at most this many rows take small_m_gemm without a timing. Timed alone, cuBLASLt is as fast or
// faster for QKV and O at one row (1.04-1.10, below), but inside a graphed decode step small_m_gemm requests
// its weights before the kernel ahead of it has finished (programmatic dependent launch), which no isolated
// timing sees: whole steps with small_m_gemm for every such shape against the timed choice (H100,
// bench/RESULTS.md 2026-12-07): 20b 1 / 2 / 4 / 8 rows -1.3% / -0.9% / -1.6% / -0.8%, 120b 1 / 2 / 4 rows
// -0.6% / -0.7% / -1.1%; at 16 rows +4%, so above 8 the timing decides.
constexpr int kStepSmallMRows = 8;

bool timing_allowed(const DenseGemmArgs& a, cudaStream_t stream) {
  if (!t_timing_allowed || a.accumulate) return false;
  cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  ORCHID_CUDA_CHECK(cudaStreamIsCapturing(stream, &cs));
  return cs == cudaStreamCaptureStatusNone;
}
TimedChoices& timed_choices() {
  static TimedChoices choices;
  return choices;
}

}  // namespace

struct DenseGemm::Impl {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  std::mutex mu;
  std::map<Key, Plan> plans;
  int device = 0;
  DeviceKind kind{};
  DenseGemm::SmallM policy = DenseGemm::SmallM::kMeasured;
  int outright_rows = kStepSmallMRows;  // kMeasured: small_m_gemm without a timing up to this many rows
  bool time_algorithms = true;          // false: the heuristic's first algorithm for every shape

  ~Impl() {
    for (auto& [key, p] : plans) {
      cublasLtMatrixLayoutDestroy(p.a);
      cublasLtMatrixLayoutDestroy(p.b);
      cublasLtMatrixLayoutDestroy(p.c);
      cublasLtMatmulDescDestroy(p.desc);
    }
    if (handle) cublasLtDestroy(handle);
  }

  // Tries one epilogue; returns false when the heuristic has no algorithm for it.
  bool make_plan(const DenseGemmArgs& a, int64_t ldx, int64_t ldy, bool bias_epilogue, Plan* out) {
    const cudaDataType_t out_type = a.out == GemmOut::kBf16 ? CUDA_R_16BF : CUDA_R_32F;
    Plan p;
    ORCHID_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    // Row-major y = x W^T is column-major y^T = W x^T: A = W ([k, n] column-major, transposed),
    // B = x ([k, m] column-major), C = D = y^T ([n, m] column-major).
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    ORCHID_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    ORCHID_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    cublasLtEpilogue_t epi = bias_epilogue ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    ORCHID_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    ORCHID_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, CUDA_R_16BF, uint64_t(a.k), uint64_t(a.n), a.k));
    ORCHID_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, CUDA_R_16BF, uint64_t(a.k), uint64_t(a.m), ldx));
    ORCHID_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.c, out_type, uint64_t(a.n), uint64_t(a.m), ldy));

    cublasLtMatmulPreference_t pref = nullptr;
    ORCHID_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t ws = workspace_bytes;
    ORCHID_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                             &ws, sizeof(ws)));
    cublasLtMatmulHeuristicResult_t results[kHeuristicCandidates]{};
    int found = 0;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle, p.desc, p.a, p.b, p.c, p.c, pref,
                                                       kHeuristicCandidates, results, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (st != CUBLAS_STATUS_SUCCESS || found == 0) {
      cublasLtMatrixLayoutDestroy(p.a);
      cublasLtMatrixLayoutDestroy(p.b);
      cublasLtMatrixLayoutDestroy(p.c);
      cublasLtMatmulDescDestroy(p.desc);
      return false;
    }
    for (int i = 0; i < found; ++i)
      if (results[i].state == CUBLAS_STATUS_SUCCESS) p.algos[p.num_algos++] = results[i].algo;
    if (p.num_algos > 0 && a.m <= kTimedMaxRows) add_split_k(p);
    p.bias_epilogue = bias_epilogue;
    *out = p;
    return true;
  }

  ChoiceKey choice_key(const DenseGemmArgs& a, int64_t ldx, int64_t ldy) const {
    return {kind, Key{a.m, a.n, a.k, ldx, ldy, int(a.out), a.bias != nullptr}, workspace_bytes};
  }

  // The heuristic's first algorithm split kSplitK ways, each where cuBLASLt accepts it within the workspace.
  void add_split_k(Plan& p) {
    int32_t supported = 0;
    size_t written = 0;
    if (cublasLtMatmulAlgoCapGetAttribute(&p.algos[0], CUBLASLT_ALGO_CAP_SPLITK_SUPPORT, &supported,
                                          sizeof(supported), &written) != CUBLAS_STATUS_SUCCESS ||
        supported == 0)
      return;
    uint32_t schemes = 0;
    if (cublasLtMatmulAlgoCapGetAttribute(&p.algos[0], CUBLASLT_ALGO_CAP_REDUCTION_SCHEME_MASK, &schemes,
                                          sizeof(schemes), &written) != CUBLAS_STATUS_SUCCESS)
      return;
    // fp32 partial sums (the accumulation's own precision) only: a split that rounds its parts to a bf16
    // output first would add a rounding the unsplit GEMM does not have.
    if ((schemes & CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE) == 0) return;
    const uint32_t scheme = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    for (const int32_t split : kSplitK) {
      cublasLtMatmulAlgo_t algo = p.algos[0];
      cublasLtMatmulHeuristicResult_t checked{};
      if (cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &split,
                                               sizeof(split)) != CUBLAS_STATUS_SUCCESS ||
          cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &scheme,
                                               sizeof(scheme)) != CUBLAS_STATUS_SUCCESS ||
          cublasLtMatmulAlgoCheck(handle, p.desc, p.a, p.b, p.c, p.c, &algo, &checked) !=
              CUBLAS_STATUS_SUCCESS ||
          checked.workspaceSize > workspace_bytes)
        continue;
      p.algos[p.num_algos++] = algo;
    }
  }

  Plan& plan_for(const DenseGemmArgs& a, int64_t ldx, int64_t ldy) {
    Key key{a.m, a.n, a.k, ldx, ldy, int(a.out), a.bias != nullptr};
    auto it = plans.find(key);
    if (it != plans.end()) return it->second;
    Plan p;
    bool ok = (a.bias && make_plan(a, ldx, ldy, true, &p)) || make_plan(a, ldx, ldy, false, &p);
    ORCHID_KERNEL_REQUIRE(ok && p.num_algos > 0, "cuBLASLt has no algorithm for this BF16 GEMM shape");
    return plans.emplace(key, p).first->second;
  }
};

DenseGemm::DenseGemm(void* workspace, size_t workspace_bytes) : impl_(std::make_unique<Impl>()) {
  ORCHID_KERNEL_REQUIRE(workspace_bytes == 0 || reinterpret_cast<uintptr_t>(workspace) % 16 == 0,
                        "DenseGemm: workspace must be 16-byte aligned");
  ORCHID_CUBLAS_CHECK(cublasLtCreate(&impl_->handle));
  ORCHID_CUDA_CHECK(cudaGetDevice(&impl_->device));
  const DeviceInfo& info = device_info();
  impl_->kind =
      DeviceKind{info.cc_major * 10 + info.cc_minor, info.sm_count, info.l2_bytes, info.global_mem_bytes};
  impl_->workspace = workspace;
  impl_->workspace_bytes = workspace ? workspace_bytes : 0;
  // ORCHID_SMALL_M=orchid|cublas forces the small-m choice (for measuring a whole step either way), =timed
  // times every small-m shape (no 8-row rule);
  // ORCHID_GEMM_ALGO=heuristic keeps cuBLASLt's first algorithm for every shape (no timing at first use).
  if (const char* v = std::getenv("ORCHID_SMALL_M")) {
    if (std::strcmp(v, "orchid") == 0) impl_->policy = SmallM::kOrchid;
    if (std::strcmp(v, "cublas") == 0) impl_->policy = SmallM::kCublas;
    if (std::strcmp(v, "timed") == 0) impl_->outright_rows = 0;
  }
  if (const char* v = std::getenv("ORCHID_GEMM_ALGO"))
    impl_->time_algorithms = std::strcmp(v, "heuristic") != 0;
}

DenseGemm::~DenseGemm() = default;

DenseGemm::TimingScope::TimingScope() : outer_(t_timing_allowed) {
  t_timing_allowed = true;
}
DenseGemm::TimingScope::~TimingScope() {
  t_timing_allowed = outer_;
}

bool DenseGemm::bias_fused(const DenseGemmArgs& a) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  const int64_t ldx = a.ldx ? a.ldx : a.k, ldy = a.ldy ? a.ldy : a.n;
  return impl_->plan_for(a, ldx, ldy).bias_epilogue;
}

void DenseGemm::set_small_m(SmallM policy) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->policy = policy;
}

bool DenseGemm::uses_small_m(const DenseGemmArgs& a) {
  if (!small_m_gemm_supports(a)) return false;
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (impl_->policy != SmallM::kMeasured) return impl_->policy == SmallM::kOrchid;
  if (a.m <= impl_->outright_rows) return true;
  const int64_t ldx = a.ldx ? a.ldx : a.k, ldy = a.ldy ? a.ldy : a.n;
  TimedChoices& timed = timed_choices();
  std::lock_guard<std::mutex> timed_lock(timed.mu);
  auto it = timed.small_m.find(impl_->choice_key(a, ldx, ldy));
  return it != timed.small_m.end() ? it->second : kUntimedSmallM;
}

int DenseGemm::cublas_algorithms(const DenseGemmArgs& a) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  const int64_t ldx = a.ldx ? a.ldx : a.k, ldy = a.ldy ? a.ldy : a.n;
  return impl_->plan_for(a, ldx, ldy).num_algos;
}

int DenseGemm::cublas_algorithm(const DenseGemmArgs& a) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  const int64_t ldx = a.ldx ? a.ldx : a.k, ldy = a.ldy ? a.ldy : a.n;
  return impl_->plan_for(a, ldx, ldy).chosen;
}

void DenseGemm::use_cublas_algorithm(const DenseGemmArgs& a, int index) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  const int64_t ldx = a.ldx ? a.ldx : a.k, ldy = a.ldy ? a.ldy : a.n;
  Plan& p = impl_->plan_for(a, ldx, ldy);
  ORCHID_KERNEL_REQUIRE(index >= 0 && index < p.num_algos, "DenseGemm: no such cuBLASLt algorithm");
  p.chosen = index;
}

namespace {
// A measured alternative (small_m_gemm over cuBLASLt, another cuBLASLt algorithm over the heuristic's first)
// is taken only when it needs less than this fraction of the default's time: a choice by a hair would flip
// with timing noise between processes, and the outputs' last bits with it (two instances of one model would
// disagree). Measured on an H200 (bench/RESULTS.md): small_m_gemm for the router GEMMs 0.56, O at 8 rows
// 0.85; QKV and O at 1 row 1.04-1.10.
constexpr float kClearWin = 0.9f;

// A device buffer of twice the L2 cache, written before each timed run so that the weights come from HBM as
// they do in a model step (a layer's weights, 20-60 MB, would otherwise sit in the 50 MB L2 from the run
// before, and the timing would rank kernels by L2 bandwidth). Allocated at the first timing on a device and
// kept for the process (~100 MB); null when it cannot be allocated (the timing then runs warm).
struct L2Flush {
  void* buf = nullptr;
  size_t bytes = 0;
};
L2Flush l2_flush_buffer(int device) {
  static std::mutex mu;
  static std::map<int, L2Flush> buffers;
  std::lock_guard<std::mutex> lock(mu);
  auto it = buffers.find(device);
  if (it == buffers.end()) {
    L2Flush f;
    int l2 = 0;
    if (cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device) == cudaSuccess && l2 > 0) {
      f.bytes = 2 * size_t(l2);
      if (cudaMalloc(&f.buf, f.bytes) != cudaSuccess) {
        (void)cudaGetLastError();  // out of memory is not sticky: time warm instead
        f = L2Flush{};
      }
    }
    it = buffers.emplace(device, f).first;
  }
  return it->second;
}

// Median-free quick timing: the best of `reps` runs of fn on the stream (after one warm-up), each after the
// L2 flush when there is one.
template <typename Fn>
float best_ms(cudaStream_t stream, const L2Flush& flush, Fn fn, int reps = 5) {
  cudaEvent_t e0, e1;
  ORCHID_CUDA_CHECK(cudaEventCreate(&e0));
  ORCHID_CUDA_CHECK(cudaEventCreate(&e1));
  fn();
  float best = 1e30f;
  for (int i = 0; i < reps; ++i) {
    if (flush.buf != nullptr) ORCHID_CUDA_CHECK(cudaMemsetAsync(flush.buf, i & 0xff, flush.bytes, stream));
    ORCHID_CUDA_CHECK(cudaEventRecord(e0, stream));
    fn();
    ORCHID_CUDA_CHECK(cudaEventRecord(e1, stream));
    ORCHID_CUDA_CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    ORCHID_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    best = std::min(best, ms);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return best;
}
}  // namespace

template <typename Matmul>
int DenseGemm::choose_algorithm(const DenseGemmArgs& a, int64_t ldx, int64_t ldy, int num_algos,
                                Matmul matmul, cudaStream_t stream) {
  if (!impl_->time_algorithms || num_algos <= 1 || a.m > kTimedMaxRows) return 0;  // for good
  const ChoiceKey key = impl_->choice_key(a, ldx, ldy);
  TimedChoices& timed = timed_choices();
  {
    std::lock_guard<std::mutex> timed_lock(timed.mu);
    auto known = timed.algorithm.find(key);
    if (known != timed.algorithm.end()) return known->second < num_algos ? known->second : 0;
  }
  if (!timing_allowed(a, stream)) return -1;  // the heuristic's first for this call; timed in a later one
  const L2Flush flush = l2_flush_buffer(impl_->device);
  float ms[kAlgorithmCandidates];
  int chosen = 0;
  for (int i = 0; i < num_algos; ++i) {
    const auto once = [&] { matmul(i); };
    ms[i] = matmul(i) == CUBLAS_STATUS_SUCCESS ? best_ms(stream, flush, once, 3) : 1e30f;  // refused: none
    if (ms[i] < ms[chosen]) chosen = i;
  }
  if (!(ms[chosen] < kClearWin * ms[0])) chosen = 0;
  std::lock_guard<std::mutex> timed_lock(timed.mu);
  const int decided = timed.algorithm.emplace(key, chosen).first->second;  // the first to finish decides
  return decided < num_algos ? decided : 0;
}

void DenseGemm::run(const DenseGemmArgs& a, cudaStream_t stream) {
  ORCHID_KERNEL_REQUIRE(a.m > 0 && a.n > 0 && a.k > 0, "DenseGemm: empty shape");
  ORCHID_KERNEL_REQUIRE(a.x && a.w && a.y, "DenseGemm: null pointer");
  const int64_t ldx = a.ldx ? a.ldx : a.k, ldy = a.ldy ? a.ldy : a.n;
  ORCHID_KERNEL_REQUIRE(ldx >= a.k && ldy >= a.n, "DenseGemm: leading dimension smaller than the row");
  ORCHID_KERNEL_REQUIRE(!a.accumulate || a.out == GemmOut::kF32, "DenseGemm: accumulate needs fp32 output");
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (small_m_gemm_supports(a) && impl_->policy != SmallM::kCublas) {
    bool small = impl_->policy == SmallM::kOrchid || a.m <= impl_->outright_rows;
    if (!small) {
      const ChoiceKey key = impl_->choice_key(a, ldx, ldy);
      TimedChoices& timed = timed_choices();
      std::unique_lock<std::mutex> timed_lock(timed.mu);
      auto it = timed.small_m.find(key);
      if (it != timed.small_m.end()) {
        small = it->second;
      } else if (!timing_allowed(a, stream)) {
        small = kUntimedSmallM;  // for this call; timed in a later one
      } else {
        // Ours only when clearly faster: a choice by a hair would flip with timing noise between
        // processes (and with it the outputs' last bits: two instances of one model would disagree).
        timed_lock.unlock();  // run_cublas times its algorithms too
        const L2Flush flush = l2_flush_buffer(impl_->device);
        const float ours = best_ms(stream, flush, [&] { small_m_gemm(a, stream); });
        const float theirs = best_ms(stream, flush, [&] { run_cublas(a, ldx, ldy, stream); });
        timed_lock.lock();
        small = timed.small_m.emplace(key, ours < kClearWin * theirs).first->second;  // the first decides
      }
    }
    if (small) return small_m_gemm(a, stream);
  }
  run_cublas(a, ldx, ldy, stream);
}

void DenseGemm::run_cublas(const DenseGemmArgs& a, int64_t ldx, int64_t ldy, cudaStream_t stream) {
  Plan& p = impl_->plan_for(a, ldx, ldy);
  if (p.bias_epilogue) {
    ORCHID_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &a.bias, sizeof(a.bias)));
  }
  const float alpha = 1.0f, beta = a.accumulate ? 1.0f : 0.0f;
  auto matmul = [&](int i) {
    return cublasLtMatmul(impl_->handle, p.desc, &alpha, a.w, p.a, a.x, p.b, &beta, a.y, p.c, a.y, p.c,
                          &p.algos[i], impl_->workspace, impl_->workspace_bytes, stream);
  };
  // The heuristic's first algorithm, unless another of its candidates, each timed on a call's own operands
  // inside a TimingScope, is clearly faster (cuBLASLt's heuristic is no measurement: at the decode step's
  // few rows it can leave most SMs idle). Until a shape is timed its calls take the heuristic's first.
  int algo = p.chosen;
  if (algo < 0) {
    algo = choose_algorithm(a, ldx, ldy, p.num_algos, matmul, stream);
    if (algo >= 0) p.chosen = algo;  // decided for good
    algo = std::max(algo, 0);
  }
  ORCHID_CUBLAS_CHECK(matmul(algo));
  if (a.bias && !p.bias_epilogue) {
    const int64_t total = int64_t(a.m) * a.n;
    const int blocks = int(std::min<int64_t>((total + 255) / 256, 4096));
    if (a.out == GemmOut::kBf16) {
      add_bias_kernel<<<blocks, 256, 0, stream>>>(static_cast<__nv_bfloat16*>(a.y), ldy,
                                                  static_cast<const __nv_bfloat16*>(a.bias), a.m, a.n);
    } else {
      add_bias_kernel<<<blocks, 256, 0, stream>>>(static_cast<float*>(a.y), ldy,
                                                  static_cast<const float*>(a.bias), a.m, a.n);
    }
    ORCHID_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace orchid::kernels
