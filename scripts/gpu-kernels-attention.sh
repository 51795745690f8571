#!/usr/bin/env bash
# Attention-block kernels on a GPU machine (H200), with the `cuda` preset already built
# (cmake --preset cuda && cmake --build --preset cuda):
#   1. the kernel tests (GPU tests must not skip: ORCHID_REQUIRE_GPU=1; fresh random seed, printed),
#   2. compute-sanitizer memcheck on the small-shape tests (and racecheck on two of them),
#   3. the micro-benchmark table,
# then a compact summary. Logs go to build/cuda/gpu-kernels-attention/ (or $ORCHID_LOG_DIR).
#   scripts/gpu-kernels-attention.sh [--quick] [--no-bench]   --quick: fewer benchmark shapes; --no-bench: 1-2
# Exit status: 0 when every test and sanitizer check passed (a sanitizer the machine cannot run is reported,
# not failed), 1 otherwise.
set -uo pipefail
cd "$(dirname "$0")/.."

quick=""
bench_too=1
for arg in "$@"; do
  case "$arg" in
    --quick) quick="--quick" ;;
    --no-bench) bench_too=0 ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) echo "gpu-kernels-attention.sh: unknown option '$arg'" >&2; exit 2 ;;
  esac
done

build=${ORCHID_BUILD_DIR:-build/cuda}
logs=${ORCHID_LOG_DIR:-$build/gpu-kernels-attention}
mkdir -p "$logs"
export ORCHID_REQUIRE_GPU=1
export ORCHID_TEST_SEED=${ORCHID_TEST_SEED:-$(( $(date +%s) % 1000000007 ))}

norm_test=$build/tests/kernels/norm/norm_kernels_test
attn_test=$build/tests/kernels/attention/attention_kernels_test
host_test=$build/tests/kernels/attention/attention_host_test
bench=$build/bench/cuda/attention/attention_bench
for f in "$norm_test" "$attn_test" "$host_test" "$bench"; do
  if [ ! -x "$f" ]; then
    echo "missing $f: build first (cmake --preset cuda && cmake --build --preset cuda)" >&2
    exit 2
  fi
done

echo "== device"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv,noheader || true
echo "== seed: ORCHID_TEST_SEED=$ORCHID_TEST_SEED"

declare -a summary
status=0

# Runs a gtest binary; records "PASS n/n" or "FAIL k of n".
run_gtest() {
  local name=$1 bin=$2
  shift 2
  echo "== $name"
  "$bin" "$@" 2>&1 | tee "$logs/$name.log"
  local rc=${PIPESTATUS[0]}
  local total passed failed
  total=$(grep -oE '^\[==========\] [0-9]+ tests? from .* ran' "$logs/$name.log" | grep -oE '[0-9]+' | head -1)
  passed=$(grep -oE '^\[  PASSED  \] [0-9]+' "$logs/$name.log" | grep -oE '[0-9]+$' | head -1)
  failed=$(grep -oE '^\[  FAILED  \] [0-9]+ tests?' "$logs/$name.log" | grep -oE '[0-9]+' | head -1)
  if [ "$rc" -eq 0 ]; then
    summary+=("$(printf '%-34s PASS %s/%s' "$name" "${passed:-0}" "${total:-0}")")
  else
    status=1
    summary+=("$(printf '%-34s FAIL %s of %s failed (rc %s), see %s' "$name" "${failed:-?}" "${total:-?}" "$rc" \
      "$logs/$name.log")")
  fi
}

run_gtest norm_kernels_test "$norm_test"
run_gtest attention_kernels_test "$attn_test"
run_gtest attention_host_test "$host_test"

sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
# Runs one compute-sanitizer tool over a test subset; records errors, or that the tool cannot run here.
run_sanitizer() {
  local tool=$1 bin=$2 filter=$3 label=$4
  local log="$logs/sanitizer-$tool-$(basename "$bin")-${ORCHID_TEST_PREFILL:-all}.log"
  if [ -z "$sanitizer" ]; then
    summary+=("$(printf '%-34s NOT RUN (compute-sanitizer not found)' "$label")")
    return
  fi
  echo "== $label"
  timeout 900 "$sanitizer" --tool "$tool" --error-exitcode 99 "$bin" --gtest_filter="$filter" >"$log" 2>&1
  local rc=$?
  tail -n 5 "$log"
  local errors
  errors=$(grep -oE '(ERROR|RACECHECK) SUMMARY: [0-9]+' "$log" | grep -oE '[0-9]+' | tail -1)
  if grep -qE 'Device not supported|Target application terminated before first instrumented API call' "$log"; then
    summary+=("$(printf '%-34s NOT AVAILABLE on this machine (see %s)' "$label" "$log")")
  elif [ "$rc" -eq 0 ] && [ "${errors:-0}" -eq 0 ]; then
    summary+=("$(printf '%-34s PASS 0 errors' "$label")")
  else
    status=1
    summary+=("$(printf '%-34s FAIL %s errors (rc %s), see %s' "$label" "${errors:-?}" "$rc" "$log")")
  fi
}

run_sanitizer memcheck "$attn_test" '*Small*:PreciseAttention.*' "memcheck attention *Small*, precise"
run_sanitizer memcheck "$norm_test" '*Small*:*Split*' "memcheck norm *Small*, split"
race_filter='SinkAttention.SmallPrefillGptOssShapes:SinkAttention.SmallMixedStepWithPadding:PreciseAttention.Sliding*'
ORCHID_TEST_PREFILL=mma.sync run_sanitizer racecheck "$attn_test" "$race_filter" "racecheck mma.sync prefill+decode"
# The FP8 KV cache's kernels (the e4m3 ring and the per-warp / per-CTA widening into f16 tiles).
run_sanitizer memcheck "$attn_test" 'SinkAttention.Fp8KvMixedStepWithPadding:RopeKvWrite.Fp8Pools' \
  "memcheck fp8 kv"
run_sanitizer racecheck "$attn_test" 'SinkAttention.Fp8KvMixedStepWithPadding' "racecheck fp8 kv"
run_sanitizer memcheck "$attn_test" 'QkvRopeGemm.*' "memcheck fused qkv + rope"
run_sanitizer racecheck "$attn_test" 'QkvRopeGemm.ChunkAndRankShapes' "racecheck fused qkv + rope"
# The Hopper prefill kernel (the runtime's default) in both tile shapes, with sliding windows, and with split
# keys (partial results and their merge).
hopper_filter='SinkAttention.SmallPrefillGptOssShapes:SinkAttention.SmallPrefillSlidingWindow'
for cfg in hopper-128 hopper-192 hopper-192-split; do
  ORCHID_TEST_PREFILL=$cfg run_sanitizer racecheck "$attn_test" "$hopper_filter" "racecheck $cfg prefill"
  ORCHID_TEST_PREFILL=$cfg run_sanitizer memcheck "$attn_test" "$hopper_filter:SinkAttention.PrefillGqa*" \
    "memcheck $cfg prefill"
done

if [ "$bench_too" -eq 1 ]; then
  echo "== attention_bench $quick"
  "$bench" $quick 2>&1 | tee "$logs/bench.log"
  bench_rc=${PIPESTATUS[0]}
  if [ "$bench_rc" -ne 0 ]; then
    status=1
    summary+=("$(printf '%-34s FAIL (rc %s), see %s' "attention_bench" "$bench_rc" "$logs/bench.log")")
  fi
fi

echo
echo "==== attention kernels summary (ORCHID_TEST_SEED=$ORCHID_TEST_SEED; logs in $logs) ===="
for line in "${summary[@]}"; do echo "$line"; done
if [ "$bench_too" -eq 1 ]; then
  echo "---- benchmark (median us, achieved, fraction of 742 TFLOP/s or 4.17 TB/s)"
  grep -E '^(rmsnorm|qkv_rope|prefill_|decode_att)' "$logs/bench.log" || true
  grep -A5 '^projections' "$logs/bench.log" || true
fi
echo "==== $( [ $status -eq 0 ] && echo ALL CHECKS PASSED || echo SOME CHECKS FAILED )"
exit $status
