#!/usr/bin/env bash
# GEMM + MoE kernels on a Hopper GPU, with the `cuda` preset already built
# (cmake --preset cuda && cmake --build --preset cuda):
#   1. the GPU tests kernels_gemm_test and kernels_moe_test (every kernel vs its CPU reference),
#   2. compute-sanitizer memcheck over a small subset (the small-shape cases of every kernel; the
#      gpt-oss-size cases are left out because memcheck slows CUTLASS kernels ~100x),
#   3. the micro-benchmark moe_bench,
# then prints a compact summary (test counts, failed checks, memcheck errors, the benchmark table) last.
# GPU tests must not skip there (ORCHID_REQUIRE_GPU=1); the random seed is fresh and printed
# (ORCHID_TEST_SEED replays it). Logs go to build/cuda/gpu-kernels-moe/ (or $ORCHID_LOG_DIR).
#   scripts/gpu-kernels-moe.sh [--quick] [--no-bench]   --quick: fewer benchmark repetitions and shapes
# Exit status: 0 when every test, memcheck run and the benchmark succeeded, 1 otherwise.
set -uo pipefail
cd "$(dirname "$0")/.."
build=${ORCHID_BUILD_DIR:-build/cuda}
out=${ORCHID_LOG_DIR:-$build/gpu-kernels-moe}
mkdir -p "$out"
quick=""
bench=1
for a in "$@"; do
  case "$a" in
    --quick) quick=--quick ;;
    --no-bench) bench=0 ;;
    *) echo "usage: $0 [--quick] [--no-bench]" >&2; exit 2 ;;
  esac
done
for b in tests/kernels/gemm/kernels_gemm_test tests/kernels/moe/kernels_moe_test bench/cuda/moe/moe_bench; do
  [ -x "$build/$b" ] || { echo "missing $build/$b: build the cuda preset first" >&2; exit 2; }
done
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | sed 's/^/gpu: /'
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)

export ORCHID_REQUIRE_GPU=1  # on the GPU machine a skipped GPU test is a failure
export ORCHID_TEST_SEED=${ORCHID_TEST_SEED:-$(( $(date +%s) % 1000000007 ))}
echo "ORCHID_TEST_SEED=$ORCHID_TEST_SEED"
status=0
run_test() {  # name binary
  echo "==== $1"
  "$build/$2" --gtest_color=no 2>&1 | tee "$out/$1.log" | grep -E '^\[check\]|^\[info\]|^\[  FAILED|^\[  PASSED|^\[  SKIPPED \] [0-9]'
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
}
run_test kernels_gemm_test tests/kernels/gemm/kernels_gemm_test
run_test kernels_moe_test tests/kernels/moe/kernels_moe_test

# memcheck subset: small shapes of every kernel family (routing, activations, conversions, MXFP4 GEMM,
# the W4A8 GEMM and its quantizer, grouped FP8/BF16 GEMMs, dense GEMM) plus one whole MXFP4 decode layer.
memcheck_filter_moe='Mxfp4TiledPlan.*:Shapes/Mxfp4TiledGemmTest.*/t16_k96_partial_chunk:Shapes/Mxfp4TiledGemmTest.*/t64_k160_partial_chunk:Shapes/Mxfp4TiledGemmTest.*/t128_k160_partial_chunk:Formats/MoeLayerTest.*/mxfp4_h128_i96_t300_tiled128:Shapes/Mxfp4TiledGemmTest.*/t16_swiglu_small:Formats/MoeLayerTest.*/mxfp4_h128_i96_t70_tiled:Cases/TopkSoftmaxTest.*/odd_e32:Cases/RouteTest.*/t63_e32:Shapes/Mxfp4GemmTest.*/swiglu_fused_two_ntiles:Cases/TopkSoftmaxTest.*/ties_e128:Cases/PermuteTest.*/t67_e32:Cases/PermuteTest.*/chunks_t1537_e32:Tokens/ActivationTest.*/t7:Shapes/Mxfp4ToFp8Test.*/small:Shapes/Mxfp4GemmTest.*/k96_partial_chunk:Shapes/Mxfp4GemmTest.*/down_partial_cta_tile:Formats/MoeLayerTest.*/mxfp4_t1:MoeLayerSplitRouter.*:Cases/RouteTest.SplitLogits*/t63_e32:Mxfp4W4a8Activation.*:Cases/Mxfp4W4a8GemmTest.*/w4a8_partial_cta_k_tail:Cases/Mxfp4W4a8GemmTest.*/w4a8_swiglu_k_tail:Formats/MoeLayerTest.*/mxfp4_h128_i96_t55'
memcheck_filter_gemm='Groups/GroupedGemmTest.*/small_mixed:Shapes/DenseGemmTest.*/strided_m17:Shapes/DenseGemmTest.*/strided_m9_f32:Shapes/DenseGemmTest.*/n40_k96_m13_f32:DenseGemmSplitInput.*'
sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda/compute-sanitizer/compute-sanitizer 2>/dev/null | head -1)
memcheck="skipped (compute-sanitizer not found)"
if [ -n "$sanitizer" ]; then
  echo "==== memcheck ($sanitizer)"
  errs=0
  for pair in "kernels_moe_test:tests/kernels/moe/kernels_moe_test:$memcheck_filter_moe" \
              "kernels_gemm_test:tests/kernels/gemm/kernels_gemm_test:$memcheck_filter_gemm"; do
    IFS=: read -r name bin filter <<<"$pair"
    "$sanitizer" --tool memcheck --error-exitcode 99 "$build/$bin" --gtest_color=no --gtest_filter="$filter" \
      >"$out/memcheck_$name.log" 2>&1
    rc=$?
    n=$(grep -Eo 'ERROR SUMMARY: [0-9]+' "$out/memcheck_$name.log" | grep -Eo '[0-9]+' | tail -1)
    echo "memcheck $name: rc=$rc errors=${n:-?} ($(grep -c '^\[       OK \]' "$out/memcheck_$name.log") tests ran)"
    [ "$rc" -eq 0 ] || { errs=1; status=1; grep -m5 -E '=========.*(Invalid|ERROR)' "$out/memcheck_$name.log"; }
  done
  memcheck=$([ $errs -eq 0 ] && echo "clean" || echo "ERRORS (see $out/memcheck_*.log)")
fi

if [ $bench -eq 1 ]; then
  echo "==== moe_bench"
  "$build/bench/cuda/moe/moe_bench" $quick --tag "$commit" 2>&1 | tee "$out/moe_bench.log" |
    sed '/^==== moe_bench summary/,$d'
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi

echo
echo "==== gpu-kernels-moe summary (commit $commit, logs in $out)"
for t in kernels_gemm_test kernels_moe_test; do
  passed=$(grep -Eo '^\[  PASSED  \] [0-9]+' "$out/$t.log" | grep -Eo '[0-9]+$')
  failed=$(grep -Eo '^\[  FAILED  \] [0-9]+ test' "$out/$t.log" | grep -Eo '[0-9]+')
  skipped=$(grep -Eo '^\[  SKIPPED \] [0-9]+' "$out/$t.log" | grep -Eo '[0-9]+$')
  printf '%-20s passed %-4s failed %-4s skipped %s\n' "$t" "${passed:-0}" "${failed:-0}" "${skipped:-0}"
done
grep -h '^\[check\].* FAIL' "$out"/kernels_*_test.log | head -20
grep -h '^\[  FAILED  \] [A-Z]' "$out"/kernels_*_test.log | sed -E 's/, where GetParam.*//; s/ \([0-9]+ ms\)$//' | sort -u | head -20
echo "memcheck subset: $memcheck"
[ $bench -eq 1 ] && sed -n '/^==== moe_bench summary/,$p' "$out/moe_bench.log"
exit $status
