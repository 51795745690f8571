# Sourced by the serving benchmarks (scripts/gpu-serve-bench.sh, scripts/gpu-disagg-bench.sh), with $bin (the
# orchid binary) and $out (the log folder) set: start_orchid NAME SERVE-ARGS... runs `$bin serve SERVE-ARGS...`
# (stdout and stderr in $out/NAME.out and $out/NAME.log), waits until its /health answers, and sets $port;
# stop_orchids ends every instance started (the callers trap it on EXIT).
pids=()
port=""
start_orchid() {
  local name=$1
  shift
  "$bin" serve "$@" >"$out/$name.out" 2>"$out/$name.log" &
  local pid=$!
  pids+=($pid)
  port=""
  for _ in $(seq 1 900); do
    port=$(grep -Eo 'listening on http://[^:]+:[0-9]+' "$out/$name.log" | grep -Eo '[0-9]+$' | head -1)
    [ -n "$port" ] && curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && return 0
    kill -0 $pid 2>/dev/null || { echo "orchid serve ($name) exited:"; tail -20 "$out/$name.log"; exit 1; }
    sleep 0.5
  done
  echo "orchid serve ($name) did not come up"
  tail -20 "$out/$name.log"
  exit 1
}
stop_orchids() {
  local p
  for p in "${pids[@]}"; do kill -TERM $p 2>/dev/null; done
  for p in "${pids[@]}"; do wait $p 2>/dev/null; done
  pids=()
}
