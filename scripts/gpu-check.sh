#!/usr/bin/env bash
# Every GPU check in one go, on a machine with a Hopper GPU and the `cuda` preset built
# (scripts/setup.sh --cuda && cmake --preset cuda && cmake --build --preset cuda):
#   1. the kernel suites (tests, compute-sanitizer subsets, micro-benchmarks) of each kernel area,
#   2. the other GPU tests (synthetic weights on the GPU, small ops),
#   3. the whole model on the CUDA backend against transformers' FP32 logits (golden tiny checkpoint), every
#      layer of synthetic gpt-oss-20b against transformers' FP32 layer (teacher forcing), and the server on
#      synthetic gpt-oss-20b (sampling on the GPU, batching, streaming, SIGTERM),
#   4. a benchmark smoke in the seed's terms on synthetic gpt-oss-20b weights: prefill, decode, the per-kernel
#      breakdown of a decode step, and the server under `orchid bench serve` (shorter outputs than the issue's).
#   scripts/gpu-check.sh [--quick] [--tests-only | --bench-only] [--only REGEX]
#     --quick: fewer benchmark shapes; --tests-only: the checks of correctness alone (1-3, the kernel suites
#     without their micro-benchmarks), e.g. while the GPU is busy with something else; --bench-only: 4 alone
#     (the kernel suites' micro-benchmarks come only with a full run); --only REGEX: the steps whose name
#     matches (grep -E), e.g. --only 'async|fp8|ops_kernels|disagg' after a change to those paths (the
#     layer-check steps need synth-20b in the pattern: it writes their checkpoint); `--bench-only --only
#     acceptance`: the decode and long-prefill issues' tables alone.
# Exit status 0 only when every check passed. Logs: build/cuda/gpu-check/ (or $ORCHID_LOG_DIR).
set -uo pipefail
cd "$(dirname "$0")/.."
quick=""
tests=1 benches=1 only=""
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick="--quick" ;;
    --tests-only) benches=0 ;;
    --bench-only) tests=0 ;;
    --only) only=${2:?--only needs a pattern}; shift ;;
    *) echo "usage: $0 [--quick] [--tests-only | --bench-only] [--only REGEX]" >&2; exit 2 ;;
  esac
  shift
done
build=${ORCHID_BUILD_DIR:-build/cuda}
logs=${ORCHID_LOG_DIR:-$build/gpu-check}
mkdir -p "$logs"
export ORCHID_REQUIRE_GPU=1
bin=$build/src/cli/orchid
declare -a summary
status=0
step() {  # step NAME COMMAND...: runs, logs, records PASS/FAIL
  local name=$1
  shift
  if [ -n "$only" ] && ! grep -Eq -- "$only" <<<"$name"; then return 0; fi
  echo "== $name"
  "$@" 2>&1 | tee "$logs/$name.log"
  local rc=${PIPESTATUS[0]}
  summary+=("$(printf '%-28s %s' "$name" "$([ "$rc" -eq 0 ] && echo PASS || echo "FAIL (rc $rc)")")")
  [ "$rc" -eq 0 ] || status=1
}
check() { [ "$tests" -eq 0 ] || step "$@"; }   # a check of correctness
bench() { [ "$benches" -eq 0 ] || step "$@"; }  # a timing
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv,noheader || true
no_bench=$([ "$benches" -eq 0 ] && echo --no-bench)
[ "$tests" -eq 1 ] && step attention-kernels scripts/gpu-kernels-attention.sh $quick $no_bench
[ "$tests" -eq 1 ] && step moe-kernels scripts/gpu-kernels-moe.sh $quick $no_bench
for t in "$build"/tests/kernels/synthetic/synthetic_fill_test "$build"/tests/kernels/ops/ops_kernels_test \
    "$build"/tests/kernels/sampling/sampling_kernels_test "$build"/tests/runtime/runtime_cuda_sampling_test \
    "$build"/tests/runtime/runtime_cuda_kv_handoff_test "$build"/tests/runtime/runtime_cuda_eagle3_test \
    "$build"/tests/runtime/runtime_cuda_async_steps_test; do
  check "$(basename "$t")" "$t"
done
check sampling-memcheck compute-sanitizer --tool memcheck --error-exitcode 1 \
  "$build"/tests/kernels/sampling/sampling_kernels_test --gtest_filter='*EveryMode*'
check sampling-racecheck compute-sanitizer --tool racecheck --racecheck-report hazard --error-exitcode 1 \
  "$build"/tests/kernels/sampling/sampling_kernels_test --gtest_filter='*EveryMode*'
# (the prompt-by-prompt test is left out: under memcheck the GEMMs' timed choice changes, and its second
# prompt's target token is a BF16 near-tie)
check eagle3-memcheck compute-sanitizer --tool memcheck --error-exitcode 1 \
  "$build"/tests/runtime/runtime_cuda_eagle3_test --gtest_filter='*Chunked*:*Graphed*'
check eagle3-kernels "$build"/tests/kernels/eagle3/eagle3_kernels_test
# (the small-m GEMM choice is fixed: timed under memcheck it can differ between the test's two engines, and
# their logprobs, compared bit for bit, with it)
check async-steps-memcheck env ORCHID_SMALL_M=orchid compute-sanitizer --tool memcheck --error-exitcode 1 \
  "$build"/tests/runtime/runtime_cuda_async_steps_test
bench sampling-bench "$build"/bench/cuda/sampling/sampling_bench $quick
check golden-tiny python3 tools/gpu/check_golden.py --orchid "$bin"
# The FP8 (e4m3) KV cache: its accuracy against the same references, reported.
check golden-tiny-fp8kv python3 tools/gpu/check_golden.py --orchid "$bin" --kv-cache-dtype fp8
# The expert blocks in the checkpoint's word order (the default reorders them at load, mxfp4_word_order.h):
# the golden bounds hold either way.
check golden-tiny-checkpoint-order env ORCHID_MXFP4_WORD_ORDER=checkpoint python3 tools/gpu/check_golden.py --orchid "$bin"
# The post-attention norm, router and routing as three kernels (the default fuses them at 1-2 tokens).
check golden-tiny-norm-route-off env ORCHID_NORM_ROUTE=0 python3 tools/gpu/check_golden.py --orchid "$bin"
# The MXFP4 GEMMs' loops as before the straight-line stages and the m-tile pipeline (both the default):
# their tests and the golden bounds; the decode kernels' older variants (one e4m3 tile an iteration, every
# row's softmax).
check moe-mxfp4-loops-off env ORCHID_MXFP4_STRAIGHT=0 ORCHID_MXFP4_MT_PIPE=0 \
  "$build"/tests/kernels/moe/kernels_moe_test \
  --gtest_filter='Shapes/Mxfp4TiledGemmTest.*:Shapes/Mxfp4GemmTest.*:Formats/MoeLayerTest.*mxfp4*'
check golden-tiny-mxfp4-loops-off env ORCHID_MXFP4_STRAIGHT=0 ORCHID_MXFP4_MT_PIPE=0 \
  python3 tools/gpu/check_golden.py --orchid "$bin"
check attention-decode-variants env ORCHID_DECODE_FP8_SUB=1 ORCHID_DECODE_LOW_ROWS=0 \
  "$build"/tests/kernels/attention/attention_kernels_test --gtest_filter='*Decode*:*Mixed*:*GraphReplay*'
# The shipped tiny model against transformers' FP32 reference (logits, greedy up to BF16 ties).
check trained-tiny python3 tools/train/check_reference.py --orchid "$bin" --model models/orchid-tiny \
  --reference tests/golden/orchid_tiny --backend cuda --weights mxfp4,bf16
# Speculative decoding (prompt lookup, self-draft) against plain greedy decoding, up to BF16-noise ties.
check speculative-tiny python3 tools/gpu/speculative_check.py --orchid "$bin"
# Tensor/expert parallelism with every rank on this GPU, against one rank and the references.
check parallel-one-gpu python3 tools/gpu/parallel_check.py --orchid "$bin"
# Every layer of synthetic 20b against transformers' FP32 layer (teacher forcing), all three formats.
ck20=$(mktemp -d)/ck20  # 13.8 GB, removed at the end
check synth-20b "$bin" synth "$ck20" --preset 20b
check layer-check-20b python3 tools/gpu/layer_check.py --checkpoint "$ck20" \
  --layers "$(seq -s, 0 23)" --tokens 1024 --orchid "$bin"
check layer-check-20b-fp8kv python3 tools/gpu/layer_check.py --checkpoint "$ck20" \
  --layers "$(seq -s, 0 23)" --tokens 1024 --weights mxfp4 --orchid "$bin" --orchid-args "--kv-cache-dtype fp8" --report-only
check layer-check-20b-tp8-ep8 python3 tools/gpu/layer_check.py --checkpoint "$ck20" --layers 0,1,23 \
  --tokens 1024 --weights mxfp4 --orchid "$bin" --orchid-args "--tp 8 --ep 8 --collectives local"
check serve-smoke-20b python3 tools/gpu/serve_smoke.py --orchid "$bin" --model synthetic:20b --weights mxfp4
bench bench-prefill-20b "$bin" bench prefill synthetic:20b --weights fp8 --input-lens 8192,32768 --repeats 3
# The MoE's FP8 quantizers (input gather, SwiGLU) a warp a group instead of a block a row (the default).
bench bench-prefill-20b-quant-warps env ORCHID_MOE_QUANT_ROWS=0 "$bin" bench prefill synthetic:20b --weights fp8 \
  --input-lens 8192,32768 --repeats 3
# MXFP4 prefill-sized steps on the W4A8 GEMM (the default) against the FP8 conversion (ORCHID_MXFP4_W4A8=0):
# time (20b, 120b) and accuracy (2048 tokens: above the tiled kernel's 1024 at 32 experts).
bench moe-w4a8 "$build"/bench/cuda/moe/moe_bench --filter "w4a8"
bench moe-grouped-fp8 "$build"/bench/cuda/moe/moe_bench --filter "grouped fp8"
for w in 0 1; do
  bench "bench-prefill-mxfp4-w4a8-$w" env ORCHID_MXFP4_W4A8=$w "$bin" bench prefill synthetic:20b --weights mxfp4 \
    --input-lens 8192,32768 --repeats 3
  bench "bench-prefill-120b-w4a8-$w" env ORCHID_MXFP4_W4A8=$w "$bin" bench prefill synthetic:120b --weights mxfp4 \
    --input-lens 8192 --repeats 3
done
# Where W4A8 should take over from the tiled kernel: prompts of 512-2048 tokens with the tiled range cut to
# 256 tokens (W4A8 from 257) against the default (tiled up to 1024 at 32 experts).
for tm in 256 default; do
  bench "bench-prefill-mxfp4-crossover-$tm" env ORCHID_MXFP4_W4A8=1 \
    $([ "$tm" = default ] || echo ORCHID_MXFP4_TILED_MAX_TOKENS=$tm) "$bin" bench prefill synthetic:20b \
    --weights mxfp4 --input-lens 512,1024,2048 --repeats 3
done
check layer-check-20b-w4a8 env ORCHID_MXFP4_W4A8=1 python3 tools/gpu/layer_check.py --checkpoint "$ck20" \
  --layers "$(seq -s, 0 23)" --tokens 2048 --weights mxfp4 --orchid "$bin" --report-only
# MXFP4 prefill's per-layer conversion to FP8 on one CTA per block (the default) and on the persistent grid
# that loads a CTA's next block while it converts one (ORCHID_MXFP4_CONVERT=pipelined), 20b and 120b.
for cv in grid pipelined; do
  bench "bench-prefill-mxfp4-convert-$cv" env ORCHID_MXFP4_CONVERT=$cv "$bin" bench prefill synthetic:20b \
    --weights mxfp4 --input-lens 8192,32768 --repeats 3
  bench "bench-prefill-120b-convert-$cv" env ORCHID_MXFP4_CONVERT=$cv "$bin" bench prefill synthetic:120b \
    --weights mxfp4 --input-lens 8192 --repeats 3
done
# 120b prefill chunks of 2048 and 4096 tokens on the tiled MXFP4 kernel (the default up to 4096 tokens at 128
# experts: the crossover scales with the expert count) and through the FP8 conversion (from 1024, as at 32).
for tm in default 1024; do
  bench "bench-prefill-120b-tiled-max-$tm" env ORCHID_MXFP4_TILED_MAX_TOKENS=$([ $tm = default ] && echo -1 || echo $tm) \
    "$bin" bench prefill synthetic:120b --weights mxfp4 --input-lens 2048,4096 --repeats 3
done
# Whole prefills on the tiled MXFP4 kernel (its 128-token tiles above 128 rows an expert) instead of the FP8
# conversion: ORCHID_MXFP4_TILED_MAX_TOKENS above the step's tokens, against the default.
for tm in default 16384; do
  bench "bench-prefill-mxfp4-tiled-max-$tm" env ORCHID_MXFP4_TILED_MAX_TOKENS=$([ $tm = default ] && echo -1 || echo $tm) \
    "$bin" bench prefill synthetic:20b --weights mxfp4 --input-lens 4096,8192 --repeats 3
  bench "bench-prefill-120b-8k-tiled-max-$tm" env ORCHID_MXFP4_TILED_MAX_TOKENS=$([ $tm = default ] && echo -1 || echo $tm) \
    "$bin" bench prefill synthetic:120b --weights mxfp4 --input-lens 8192 --repeats 3
done
# A 128000-token prefill in steps of 16384 (the default) and 32768 tokens: MXFP4 converts each layer's experts to FP8
# once a step, so larger steps halve those conversions (~1.6 ms a layer at 120b, 36 layers, 8 steps).
for mt in 16384 32768; do
  bench "bench-prefill-120b-128k-step-$mt" "$bin" bench prefill synthetic:120b --weights mxfp4 --input-lens 128000 \
    --repeats 1 --max-num-batched-tokens $mt
done
bench bench-decode-20b "$bin" bench decode synthetic:20b --weights mxfp4 --seq-lens 8192 --batch-sizes 1,8,64,256 --steps 8
# Steps one at a time, and launched back to back as the pipelined engine runs them (the default), ctx 1024.
for mode in --no-async-scheduling ""; do
  bench "bench-decode-20b-1024${mode:+-sync}" "$bin" bench decode synthetic:20b --weights mxfp4 --seq-lens 1024 \
    --batch-sizes 1,16,64,256 --steps 32 $mode
done
# Decode steps with cuBLASLt's algorithm timed at first use (the default) and the heuristic's first
# (ORCHID_GEMM_ALGO=heuristic); with the MoE combine doing the next layer's input norm (the default) and apart
# (ORCHID_COMBINE_NORM=0).
for v in "gemm-timed ORCHID_GEMM_ALGO=timed" "gemm-heuristic ORCHID_GEMM_ALGO=heuristic" \
    "combine-norm-fused ORCHID_COMBINE_NORM=1" "combine-norm-apart ORCHID_COMBINE_NORM=0"; do
  bench "bench-decode-20b-${v%% *}" env "${v#* }" "$bin" bench decode synthetic:20b --weights mxfp4 \
    --seq-lens 1024 --batch-sizes 1,16,64,256 --steps 32
done
# The next layer's MXFP4 -> FP8 conversion beside this layer's FP8 grouped GEMM, each on SMs of its own
# from two streams (20b gate_up at 8192 tokens): does it hide, and how much bandwidth do c SMs draw?
bench moe-bench-overlap "$build"/bench/cuda/moe/moe_bench --quick --filter overlap
# The MXFP4 expert blocks as in the checkpoint and repacked (the tiled word order: fewer decode operations;
# kilobyte chunks of 16 rows: fewer, larger reads), the expert GEMMs alone and whole decode steps.
for order in checkpoint tiled; do
  bench "moe-bench-word-order-$order" env ORCHID_MXFP4_WORD_ORDER=$order "$build"/bench/cuda/moe/moe_bench \
    --quick --filter mxfp4
  bench "bench-decode-20b-word-order-$order" env ORCHID_MXFP4_WORD_ORDER=$order "$bin" bench decode \
    synthetic:20b --weights mxfp4 --seq-lens 1024 --batch-sizes 1,2,4,16,64,256 --steps 32
done
# The post-attention norm, router and routing: the chain's latency as three kernels and as one launch, and
# decode steps with the fused launch (the default at 1-2 tokens) and without (ORCHID_NORM_ROUTE=0).
bench moe-bench-norm-route "$build"/bench/cuda/moe/moe_bench --filter "norm route"
for nr in 1 0; do
  bench "bench-decode-20b-norm-route-$nr" env ORCHID_NORM_ROUTE=$nr "$bin" bench decode synthetic:20b \
    --weights mxfp4 --seq-lens 1024 --batch-sizes 1,2,4,8 --steps 32
done
# Routing: moe_route against the four-kernel path (chains of routings), and decode steps with the single-CTA
# routing up to 128 items (the default) and up to 256.
bench moe-bench-route "$build"/bench/cuda/moe/moe_bench --filter "route E"
# The one-token expert stream's memory pattern alone (chunk-major as the repacked experts, or warp-major; ring
# depth; integer work a chunk; 4 experts read inside a 32- or 128-expert tensor): the bare stream the
# streaming GEMM's time is held against (bench/RESULTS.md 2026-12-07, seventeenth run).
bench stream-pattern "$build"/bench/cuda/moe/stream_pattern_bench
for lim in 128 256; do
  bench "bench-decode-20b-route-fused-$lim" env ORCHID_ROUTE_FUSED_MAX_ITEMS=$lim "$bin" bench decode synthetic:20b \
    --weights mxfp4 --seq-lens 1024 --batch-sizes 16,32,64 --steps 32
done
# The QKV projection with its bias, RoPE and KV write in one launch at 1-8 tokens (the default) against the
# GEMM + rope_kv_write (ORCHID_QKV_ROPE=0): golden bounds and decode steps.
check golden-tiny-no-qkv-rope env ORCHID_QKV_ROPE=0 python3 tools/gpu/check_golden.py --orchid "$bin"
for qr in 0 1; do
  for m in 20b 120b; do
    bench "bench-decode-$m-qkv-rope-$qr" env ORCHID_QKV_ROPE=$qr "$bin" bench decode synthetic:$m --weights mxfp4 \
      --seq-lens 8192 --batch-sizes 1,2,4,8 --steps 32
  done
done
# Dense GEMMs of up to 8 rows on small_m_gemm outright (the default) and by a timing at first use
# (ORCHID_SMALL_M=timed), whole decode steps at 1-16 rows.
for sm in rule timed; do
  for m in 20b 120b; do
    bench "bench-decode-$m-small-m-$sm" env ORCHID_SMALL_M=$([ $sm = timed ] && echo timed || echo default) \
      "$bin" bench decode synthetic:$m --weights mxfp4 --seq-lens 8192 --batch-sizes 1,2,4,8,16 --steps 32
  done
done
# The BF16 decode kernel's ring: by the grid (the default: 3 stages when the grid is more than one wave of
# 4-stage CTAs), and 4 or 3 forced (ORCHID_DECODE_STAGES).
for st in auto 4 3; do
  bench "bench-decode-20b-decode-stages-$st" env ORCHID_DECODE_STAGES=$st "$bin" bench decode synthetic:20b \
    --weights mxfp4 --seq-lens 1024,32768 --batch-sizes 1,64,256 --steps 16
done
# The router GEMM, top-k and permutation of a step in one launch, with the block's input norm (the default
# from 8 tokens at up to 32 experts; ORCHID_ROUTER_ROUTE=0 the router GEMM + moe_route, =1 the launch without
# the norm, =2 with it at any expert count): the MoE layer tests through each forced mode, and decode steps
# at 4-256 sequences against each other.
for rr in 0 1 2; do
  check "router-route-tests-$rr" env ORCHID_ROUTER_ROUTE=$rr "$build"/tests/kernels/moe/kernels_moe_test \
    --gtest_filter='*RouterRoute*:*NormRoute*:*RouteTest*:Formats/MoeLayerTest.*:MoeLayerSplitRouter.*:Paths/MoeLayerExpertParallelTest.*'
done
check router-route-racecheck compute-sanitizer --tool racecheck --racecheck-report hazard --error-exitcode 1 \
  "$build"/tests/kernels/moe/kernels_moe_test --gtest_filter='Cases/RouterRouteTest.*/t37*:Cases/RouterRouteTest.*/norm_t37*'
check router-route-memcheck compute-sanitizer --tool memcheck --error-exitcode 1 \
  "$build"/tests/kernels/moe/kernels_moe_test --gtest_filter='Cases/RouterRouteTest.*'
bench moe-bench-router-route "$build"/bench/cuda/moe/moe_bench --filter "router route"
for sl in 4 16; do  # the fused kernel's k slices forced (default 8)
  bench "moe-bench-router-route-slices-$sl" env ORCHID_ROUTER_SLICES=$sl "$build"/bench/cuda/moe/moe_bench \
    --filter "router route"
done
for rr in 0 1 2; do
  bench "bench-decode-20b-router-route-$rr" env ORCHID_ROUTER_ROUTE=$rr "$bin" bench decode synthetic:20b \
    --weights mxfp4 --seq-lens 1024 --batch-sizes 4,16,64,128,256 --steps 32
done
# The decode step's switches, each against its default: the MXFP4 GEMMs' straight-line stages and m-tile
# pipeline, the tiled down GEMM on 128-row CTAs, the down GEMM's weights before its wait, the streaming GEMM's
# bias skipped by the tensor's largest scale (ORCHID_MXFP4_SCALE_MAX=0 reduces it from the scales), the decode kernels'
# low rows and two e4m3 tiles an iteration.
for v in ORCHID_MXFP4_STRAIGHT=0 ORCHID_MXFP4_MT_PIPE=0 ORCHID_MXFP4_DOWN_ROWS=128 ORCHID_MOE_EARLY_WEIGHTS=0 \
    ORCHID_MXFP4_SCALE_MAX=0 ORCHID_DECODE_LOW_ROWS=0 ORCHID_DECODE_FP8_SUB=1 ORCHID_DEFAULTS=1; do
  bench "bench-decode-20b-${v%%=*}-${v#*=}" env "$v" "$bin" bench decode synthetic:20b --weights mxfp4 \
    --seq-lens 1024 --batch-sizes 1,2,16,64,256 --steps 32
done
for v in ORCHID_DECODE_LOW_ROWS=0 ORCHID_DECODE_FP8_SUB=1 ORCHID_DEFAULTS=1; do
  bench "attention-decode-${v%%=*}-${v#*=}" env "$v" "$build"/bench/cuda/attention/attention_bench --decode
done
# The MXFP4 expert GEMMs alone, and 120b at one token, where the streaming GEMM is a third of the step.
bench moe-mxfp4 "$build"/bench/cuda/moe/moe_bench --quick --filter "mxfp4 "
bench bench-decode-120b "$bin" bench decode synthetic:120b --weights mxfp4 --seq-lens 8192 --batch-sizes 1,64 \
  --steps 16
# The Hopper prefill kernel on its persistent grid (the default: one CTA per SM looping over the work items)
# and on one CTA per item (ORCHID_PREFILL_PERSISTENT=0).
for grid in persistent one-shot; do
  bench "attention-prefill-$grid" env ORCHID_PREFILL_PERSISTENT=$([ $grid = persistent ] && echo 1 || echo 0) \
    "$build"/bench/cuda/attention/attention_bench --prefill
done
# The window tile's output by 16-byte stores (ORCHID_PREFILL_TMA_STORE=0) against the default's tensor stores
# (the persistent row above).
bench attention-prefill-no-tma-store env ORCHID_PREFILL_TMA_STORE=0 "$build"/bench/cuda/attention/attention_bench \
  --prefill
# Long-context decode with a BF16 and an FP8 KV cache (the FP8 cache's point: half the bytes a key).
for kv in bf16 fp8; do
  bench "bench-decode-32k-$kv" "$bin" bench decode synthetic:20b --weights mxfp4 --seq-lens 32768 \
    --batch-sizes 1,64 --steps 8 --kv-cache-dtype $kv
done
# Speculative decoding's verify step (1 + K tokens a sequence) against the plain step, 20b and 120b.
bench bench-verify-20b "$bin" bench decode synthetic:20b --weights mxfp4 --seq-lens 8192 --batch-sizes 1,32 \
  --steps 8 --draft-tokens 0,1,2,3,4
bench bench-verify-120b "$bin" bench decode synthetic:120b --weights mxfp4 --seq-lens 8192 --batch-sizes 1,32 \
  --steps 8 --draft-tokens 0,1,2,3,4
# Speculation end to end on the trained pair: no speculation, prompt lookup and the draft model at 1 and 32 users.
bench speculative-trained-tiny tools/gpu/speculative_bench.sh "$bin" models/orchid-tiny models/orchid-tiny-draft \
  tests/golden/orchid_tiny 3 cuda
# Where a decode step's time goes (CUPTI tracer, built with the cuda preset when CUPTI is there).
tracer=$build/bench/cuda/trace/liborchid_kernel_trace.so
[ -f "$tracer" ] && bench kernel-breakdown-20b python3 tools/gpu/kernel_breakdown.py --orchid "$bin" \
  --tracer "$tracer" --model synthetic:20b --batch-sizes 1,256 --seq-len 1024
# Where a batch-1 prefill's time goes, against compute floors (the MXFP4 path and FP8 weights).
for w in fp8 mxfp4; do
  [ -f "$tracer" ] && bench "prefill-breakdown-20b-$w" python3 tools/gpu/kernel_breakdown.py --orchid "$bin" \
    --tracer "$tracer" --model synthetic:20b --weights $w --prefill-lens 8192,32768
done
check structured-outputs-20b tools/gpu/structured_outputs_gpu.sh "$bin"
# A prefill and a decode instance sharing the GPU against one instance (greedy, up to BF16 ties).
check disaggregation-tiny python3 tools/gpu/disaggregation_check.py --orchid "$bin" --model models/orchid-tiny
check disaggregation-golden python3 tools/gpu/disaggregation_check.py --orchid "$bin" \
  --model tests/golden/tiny/checkpoint
check disaggregation-20b python3 tools/gpu/disaggregation_check.py --orchid "$bin" --model synthetic:20b
# A TP1 prefill instance feeding a TP2 decode instance (its two ranks on this GPU): each decode rank copies
# its KV heads from the prefill rank's buffer in place.
check disaggregation-tp1-tp2 python3 tools/gpu/disaggregation_check.py --orchid "$bin" \
  --model tests/golden/tiny/checkpoint --decode-args "--tp 2 --collectives local"
# The pair (K/V over CUDA IPC) against one instance at the same total memory, under orchid bench serve.
bench disagg-bench-20b env ORCHID_LOG_DIR="$logs/disagg-bench" scripts/gpu-disagg-bench.sh synthetic:20b
bench serve-bench-20b env ORCHID_SERVE_WORKLOADS="1:128:256 64:128:256 256:128:128" scripts/gpu-serve-bench.sh synthetic:20b
# The same with each step read before the next is planned (--no-async-scheduling; the default pipelines).
bench serve-bench-20b-sync env ORCHID_LOG_DIR="$logs/serve-bench-sync" \
  ORCHID_SERVE_WORKLOADS="1:128:256 64:128:256 256:128:128" scripts/gpu-serve-bench.sh synthetic:20b -- --no-async-scheduling
# The acceptance tables of the decode issue (#11) and the long-prefill issue (#13), as the issues state them
# (on an H200; `--bench-only --only acceptance` runs these alone): the decode grid and 120b, batch-1
# prefill of 20b (both formats) and 120b, the attention kernels' prefill lines, the serving workloads
# (orchid serve + orchid bench serve, the issue's four), and FP8 against BF16 KV at 32k.
bench acceptance-decode-20b "$bin" bench decode synthetic:20b --weights mxfp4 --seq-lens 1024,8192 \
  --batch-sizes 1,2,4,8,16,32,64,128,256 --steps 32
bench acceptance-decode-120b "$bin" bench decode synthetic:120b --weights mxfp4 --seq-lens 8192 --batch-sizes 1,64 \
  --steps 32
for w in fp8 mxfp4; do
  bench "acceptance-prefill-20b-$w" "$bin" bench prefill synthetic:20b --weights $w \
    --input-lens 8192,32768,65536,128000 --repeats 2
done
bench acceptance-prefill-120b "$bin" bench prefill synthetic:120b --weights mxfp4 --input-lens 8192,128000 --repeats 2
bench acceptance-attention-prefill "$build"/bench/cuda/attention/attention_bench --prefill
bench acceptance-serve-20b env ORCHID_LOG_DIR="$logs/acceptance-serve" scripts/gpu-serve-bench.sh synthetic:20b
for kv in bf16 fp8; do
  bench "acceptance-kv-$kv" "$bin" bench decode synthetic:20b --weights mxfp4 --seq-lens 32768 --batch-sizes 64 \
    --steps 8 --kv-cache-dtype $kv
done
rm -rf "$(dirname "$ck20")"
echo "==== gpu-check summary (logs in $logs)"
printf '%s\n' "${summary[@]}"
exit $status
