// Dense BF16 GEMM through cuBLASLt: y[m, n] = x[m, k] · W[n, k]^T (+ bias[n]), fp32 accumulate, bf16 or
// fp32 output. Serves every linear layer whose weights stay BF16 in all `--weights` modes (the checkpoint
// keeps them BF16 and they are a small part of the bytes): fused QKV (n = 5120), O-proj (n = 2880,
// k = 4096), the router (n = E, fp32 logits) and lm_head (n = 201088).
//
// The cuBLASLt algorithm is chosen once per shape and cached: the heuristic offers up to eight, and for
// decode-sized shapes (up to 512 rows) the first call outside a graph capture times them on its own operands
// and keeps the heuristic's first unless another is clearly faster (dense_gemm.cu). The workspace is owned by
// the caller and given at construction, so a call allocates nothing and can be captured in a CUDA graph. For
// a few rows (m <= 16, decode) orchid's small_m_gemm competes: up to 8 rows it serves the shape outright (in
// a graphed step it fetches its weights under the previous kernel's tail, which a timing of the GEMM alone
// does not show); at 9-16 rows the first call of a shape outside a graph capture times both on the call's own
// operands and keeps small_m_gemm when clearly faster.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>

namespace orchid::kernels {

enum class GemmOut : uint8_t { kBf16, kF32 };

struct DenseGemmArgs {
  int m = 0, n = 0, k = 0;
  const void* x = nullptr;  // bf16 [m, k], rows ldx elements apart (0: k)
  int64_t ldx = 0;
  const void* w = nullptr;  // bf16 [n, k] row-major (nn.Linear [out, in]), contiguous
  // [n]; same type as the output (bf16 for kBf16, fp32 for kF32: convert small fp32 biases such as the
  // router's at load). nullptr: no bias.
  const void* bias = nullptr;
  void* y = nullptr;  // [m, n], rows ldy elements apart (0: n)
  int64_t ldy = 0;
  GemmOut out = GemmOut::kBf16;
  // y += x W^T (+ bias) instead of y = ...: fp32 output only. Two calls, the second accumulating, multiply
  // an fp32 activation kept as two BF16 halves (hi + lo: 16 significant bits instead of 8) by a BF16 weight
  // with fp32 accumulation (the precise layer, cuda_backend.h).
  bool accumulate = false;
};

class DenseGemm {
 public:
  static constexpr size_t kRecommendedWorkspace = size_t(32) << 20;

  // `workspace` is device memory of `workspace_bytes` (16-byte aligned), used by every call in stream order.
  DenseGemm(void* workspace, size_t workspace_bytes);
  ~DenseGemm();
  DenseGemm(const DenseGemm&) = delete;
  DenseGemm& operator=(const DenseGemm&) = delete;

  void run(const DenseGemmArgs& args, cudaStream_t stream);

  // Which kernel serves small-m shapes: small_m_gemm up to 8 rows and where a timing at first use finds it
  // clearly faster (default; dense_gemm.cu says how clearly), or one of them always
  // (benchmarks; the environment's ORCHID_SMALL_M=orchid|cublas sets it for a whole process, =timed times
  // every small-m shape, and
  // ORCHID_GEMM_ALGO=heuristic keeps cuBLASLt's first algorithm for every shape).
  enum class SmallM : uint8_t { kMeasured, kCublas, kOrchid };
  void set_small_m(SmallM policy);
  // For tests/benchmarks: whether this shape is (or would now be) served by small_m_gemm.
  bool uses_small_m(const DenseGemmArgs& args);

  // First-use timing (small_m_gemm against cuBLASLt, cuBLASLt's algorithms against the heuristic's first)
  // runs only on a thread inside a TimingScope, outside graph captures. The runtime opens one around the
  // eager first run of each graphed decode step, whose shapes recur every step. Elsewhere (prefill chunks
  // and mixed steps, whose row counts change with every prompt; timing each would stall the step for up to
  // milliseconds) a shape takes the choice an instance timed for it before, or the untimed default.
  class TimingScope {
   public:
    TimingScope();
    ~TimingScope();
    TimingScope(const TimingScope&) = delete;
    TimingScope& operator=(const TimingScope&) = delete;

   private:
    bool outer_;
  };

  // For tests/benchmarks: the cuBLASLt algorithms the heuristic offers for this shape, the one it runs
  // (-1 until a call decides it: a timed one, or one whose shape is never timed), and making it run the
  // index-th from now on.
  int cublas_algorithms(const DenseGemmArgs& args);
  int cublas_algorithm(const DenseGemmArgs& args);
  void use_cublas_algorithm(const DenseGemmArgs& args, int index);

  // How the last run of this shape was served (for tests/benchmarks): true when the bias came from the
  // cuBLASLt epilogue, false when a separate bias kernel ran after the GEMM.
  bool bias_fused(const DenseGemmArgs& args);

 private:
  void run_cublas(const DenseGemmArgs& args, int64_t ldx, int64_t ldy, cudaStream_t stream);  // lock held
  template <typename Matmul>                                                                  // lock held
  int choose_algorithm(const DenseGemmArgs& args, int64_t ldx, int64_t ldy, int num_algos, Matmul matmul,
                       cudaStream_t stream);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace orchid::kernels
