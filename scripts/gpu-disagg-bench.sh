#!/usr/bin/env bash
# Prefill/decode disaggregation on one GPU against one instance at the same total memory: a `--role prefill`
# and a `--role decode` instance (each --gpu-memory-utilization 0.45, the K/V in place over CUDA IPC), then a
# `--role both` instance at 0.9, each under `orchid bench serve` (one wave of N streamed requests of random
# token-id prompts, ignore_eos) per workload; TTFT and TPOT p50/p99 for both, and the pair's transfer:
# prompts handed over in place, bytes, and TTFT's transfer share with its GB/s (the page copy on the decode
# side runs at admission, inside its step; its floor is the bytes read and written once at HBM speed).
#   scripts/gpu-disagg-bench.sh [MODEL] [-- extra orchid serve flags for every instance]
#   ORCHID_DISAGG_WORKLOADS="users:in:out ..." (default 1:8192:128 16:4096:256 64:1024:256)
# ORCHID_DISAGG_BACKEND=cpu runs the same on the CPU backend (a dry run of the script; K/V in shared memory).
# Logs and JSON: build/cuda/gpu-disagg-bench/ (or $ORCHID_LOG_DIR). Exit status 0 when every request of every
# workload succeeded with its exact length and every prompt went through the pair in place.
set -uo pipefail
cd "$(dirname "$0")/.."
build=${ORCHID_BUILD_DIR:-build/cuda}
bin=$build/src/cli/orchid
out=${ORCHID_LOG_DIR:-$build/gpu-disagg-bench}
mkdir -p "$out"
model=synthetic:20b
if [ $# -gt 0 ] && [ "$1" != "--" ]; then model=$1; shift; fi
[ "${1:-}" = "--" ] && shift
workloads=${ORCHID_DISAGG_WORKLOADS:-"1:8192:128 16:4096:256 64:1024:256"}
[ -x "$bin" ] || { echo "missing $bin: build the cuda preset first" >&2; exit 2; }

source scripts/lib/orchid-serve.sh
trap stop_orchids EXIT
start() {  # start NAME FLAGS...: an instance of $model on the backend asked for
  local name=$1
  shift
  start_orchid "$name" "$model" --port 0 --backend "${ORCHID_DISAGG_BACKEND:-cuda}" --max-connections-per-client 0 "$@"
}
status=0
rows=()
run_workloads() {  # run_workloads LABEL PORT
  local label=$1 p=$2
  for w in $workloads; do
    IFS=: read -r users in_len out_len <<<"$w"
    local name="${label}_u${users}_${in_len}_${out_len}"
    "$bin" bench serve --url "http://127.0.0.1:$p" --num-prompts "$users" --max-concurrency "$users" \
      --input-len "$in_len" --output-len "$out_len" --json >"$out/$name.json" 2>"$out/$name.err" || status=1
    rows+=("$(python3 - "$out/$name.json" "$label" "$users" "$in_len" "$out_len" <<'PY'
import json, sys
p, label, users, i, o = sys.argv[1:]
try:
    r = json.load(open(p))
except Exception as e:
    print(f"| {label} | {users} | {i}/{o} | failed ({e}) |||||")
    sys.exit()
print(f"| {label} | {users} | {i}/{o} | {r['ttft']['p50_ms']:.0f} / {r['ttft']['p99_ms']:.0f} | "
      f"{r['tpot']['p50_ms']:.2f} / {r['tpot']['p99_ms']:.2f} | {r['output_tokens_per_s']:.0f} | "
      f"{r['completed']} | {r['errors']} | {r['length_mismatches']} |")
PY
)")
  done
}

start prefill --role prefill --gpu-memory-utilization 0.45 "$@"
prefill_port=$port
start decode --role decode --prefill-url "http://127.0.0.1:$prefill_port" --gpu-memory-utilization 0.45 "$@"
decode_port=$port
run_workloads pair "$decode_port"
curl -sf "http://127.0.0.1:$decode_port/metrics" >"$out/decode.metrics"
curl -sf "http://127.0.0.1:$prefill_port/metrics" >"$out/prefill.metrics"
stop_orchids
start single --gpu-memory-utilization 0.9 "$@"
run_workloads single "$port"

echo "==== gpu-disagg-bench: $model $* (commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown))"
echo "| instances | users | in/out | TTFT p50/p99 ms | TPOT p50/p99 ms | output tok/s | completed | errors | length mismatches |"
echo "|---|---|---|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
python3 - "$out/decode.metrics" "$out/prefill.metrics" <<'PY' || status=1
import sys
def read(path):
    m = {}
    for line in open(path):
        if line.startswith("#") or " " not in line:
            continue
        k, v = line.rsplit(" ", 1)
        m[k] = float(v)
    return m
d, p = read(sys.argv[1]), read(sys.argv[2])
n = d.get("orchid_remote_prefill_requests_total", 0)
shared = d.get("orchid_remote_prefill_shared_total", 0)
moved = d.get("orchid_kv_import_bytes_total", 0)
t = d.get("orchid_remote_prefill_transfer_seconds_sum", 0)
c = d.get("orchid_remote_prefill_compute_seconds_sum", 0)
print(f"pair: {shared:.0f} of {n:.0f} prompts in place, {moved / 1e9:.2f} GB imported, failures "
      f"{d.get('orchid_remote_prefill_failures_total', 0):.0f}; TTFT's prefill share {c:.2f} s and transfer "
      f"share {t * 1e3:.1f} ms in all" + (f" ({moved / t / 1e9:.1f} GB/s; floor: {moved * 2 / 4.8e12 * 1e3:.2f} ms "
                                       f"to read and write the bytes once at 4.8 TB/s)" if t > 0 else ""))
print(f"prefill instance: {p.get('orchid_kv_shared_exports_total', 0):.0f} exports in place, "
      f"{p.get('orchid_kv_share_leases', 0):.0f} leases still held")
sys.exit(0 if n > 0 and shared == n and d.get("orchid_remote_prefill_failures_total", 1) == 0 else 1)
PY
exit $status
