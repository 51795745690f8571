#!/usr/bin/env bash
# The serving benchmark in the terms of the decode-throughput issue: `orchid serve MODEL` on the GPU, then
# `orchid bench serve` with one wave of N streamed requests of random token-id prompts (ignore_eos, so every
# output has exactly its length) per workload, and a table of the figures last.
#   scripts/gpu-serve-bench.sh [MODEL] [-- extra orchid serve flags]     (MODEL default synthetic:20b)
#   ORCHID_SERVE_WORKLOADS="users:in:out ..." overrides the workloads (default 1:128:1024 64:128:1024
#   256:128:1024 256:1024:256). Logs and JSON: build/cuda/gpu-serve-bench/ (or $ORCHID_LOG_DIR).
#   ORCHID_SERVE_BACKEND=cpu runs the same on the CPU backend (a dry run of the script).
# Per workload, from /metrics before and after it, where an engine step's time went: scheduling, the
# backend's host work, its wait for the GPU, and taking the outputs (ms per step; host work is what a
# synchronous engine adds to the GPU's time; with --async-scheduling, the share of steps launched while the
# one before ran).
# Exit status 0 when every request of every workload succeeded with its exact length.
set -uo pipefail
cd "$(dirname "$0")/.."
build=${ORCHID_BUILD_DIR:-build/cuda}
bin=$build/src/cli/orchid
out=${ORCHID_LOG_DIR:-$build/gpu-serve-bench}
mkdir -p "$out"
model=synthetic:20b
if [ $# -gt 0 ] && [ "$1" != "--" ]; then model=$1; shift; fi
[ "${1:-}" = "--" ] && shift
workloads=${ORCHID_SERVE_WORKLOADS:-"1:128:1024 64:128:1024 256:128:1024 256:1024:256"}
[ -x "$bin" ] || { echo "missing $bin: build the cuda preset first" >&2; exit 2; }

source scripts/lib/orchid-serve.sh
trap stop_orchids EXIT
# One client opens every connection of a wave: no per-client cap.
start_orchid server "$model" --port 0 --backend "${ORCHID_SERVE_BACKEND:-cuda}" --max-connections-per-client 0 "$@"
grep -E "GPU memory|weights" "$out/server.log" | head -3
status=0
rows=()
for w in $workloads; do
  IFS=: read -r users in_len out_len <<<"$w"
  name="u${users}_${in_len}_${out_len}"
  curl -sf "http://127.0.0.1:$port/metrics" >"$out/$name.metrics.before"
  "$bin" bench serve --url "http://127.0.0.1:$port" --num-prompts "$users" --max-concurrency "$users" \
    --input-len "$in_len" --output-len "$out_len" --json >"$out/$name.json" 2>"$out/$name.err"
  rc=$?
  [ $rc -eq 0 ] || status=1
  curl -sf "http://127.0.0.1:$port/metrics" >"$out/$name.metrics.after"
  rows+=("$(python3 - "$out/$name.json" "$users" "$in_len" "$out_len" "$rc" "$out/$name.metrics" <<'PY'
import json, sys
p, users, i, o, rc, metrics = sys.argv[1:]
def read(path):
    m = {}
    try:
        for line in open(path):
            if not line.startswith("#") and " " in line:
                k, v = line.rsplit(" ", 1)
                m[k] = float(v)
    except OSError:
        pass
    return m
a, b = read(metrics + ".before"), read(metrics + ".after")
d = lambda k: b.get(k, 0) - a.get(k, 0)
steps = d("orchid_step_time_seconds_count")
phases = "n/a"
if steps > 0:
    ms = [1e3 * d(f"orchid_step_{k}_seconds_total") / steps
          for k in ("schedule", "backend_host", "device_wait", "outputs")]
    phases = f"{steps:.0f}: {ms[0]:.2f} / {ms[1]:.2f} / {ms[2]:.2f} / {ms[3]:.2f}"
    if d("orchid_pipelined_steps_total") > 0:
        phases += f" ({100 * d('orchid_pipelined_steps_total') / steps:.0f}% pipelined)"
try:
    r = json.load(open(p))
except Exception as e:
    print(f"| {users} | {i}/{o} | failed ({e}) |||||||| {phases} |")
    sys.exit()
print(f"| {users} | {i}/{o} | {r['output_tokens_per_s']:.0f} | {r['total_tokens_per_s']:.0f} | "
      f"{r['ttft']['p50_ms']:.0f} / {r['ttft']['p99_ms']:.0f} | {r['tpot']['p50_ms']:.2f} / {r['tpot']['p99_ms']:.2f} | "
      f"{r['itl']['p50_ms']:.2f} / {r['itl']['p99_ms']:.2f} | {r['completed']} | {r['errors']} | {r['length_mismatches']} | "
      f"{phases} |")
PY
)")
done
echo "==== gpu-serve-bench: $model $* (commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown))"
echo "| users | in/out | output tok/s | total tok/s | TTFT p50/p99 ms | TPOT p50/p99 ms | ITL p50/p99 ms | completed | errors | length mismatches | steps: schedule / backend host / device wait / outputs, ms a step |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
exit $status
