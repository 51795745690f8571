#!/usr/bin/env bash
# Builds the libFuzzer targets (preset `fuzz`, clang + ASan/UBSan) and runs each one.
#   scripts/fuzz.sh --ci          every target for a bounded time (CI)
#   scripts/fuzz.sh TARGET [N] [FLAGS...]   one target for N executions (default 10,000,000), for long local
#                                           runs; FLAGS go to libFuzzer (e.g. -max_len=512)
set -euo pipefail
cd "$(dirname "$0")/.."
cmake --preset fuzz >/dev/null
cmake --build --preset fuzz -j "${ORCHID_JOBS:-2}" --target orchid_fuzzers
targets=$(find build/fuzz/fuzz -maxdepth 2 -type f -name "fuzz_*" -perm -u+x 2>/dev/null | sort || true)
corpus_of() { echo "fuzz/corpus/$(basename "$1")"; }
if [ "${1:-}" = "--ci" ]; then
  for t in $targets; do
    mkdir -p "build/fuzz/corpus/$(basename "$t")"
    seeds=$(corpus_of "$t"); [ -d "$seeds" ] || seeds=""
    echo "fuzz: $(basename "$t") for ${ORCHID_FUZZ_SECONDS:-10}s"
    log="build/fuzz/$(basename "$t").log"
    if ! "$t" -max_total_time="${ORCHID_FUZZ_SECONDS:-10}" -print_final_stats=1 -artifact_prefix=build/fuzz/ \
        "build/fuzz/corpus/$(basename "$t")" $seeds >"$log" 2>&1; then
      tail -n 60 "$log"; echo "fuzz: $(basename "$t") failed"; exit 1
    fi
    grep -E 'stat::number_of_executed_units' "$log" || true
  done
else
  t="build/fuzz/fuzz/$1"
  [ -x "$t" ] || t=$(find build/fuzz/fuzz -name "$1" -type f | head -n1)
  [ -n "$t" ] || { echo "fuzz.sh: no target $1" >&2; exit 2; }
  seeds=$(corpus_of "$t"); [ -d "$seeds" ] || seeds=""
  mkdir -p "build/fuzz/corpus/$1"
  "$t" -runs="${2:-10000000}" -print_final_stats=1 -artifact_prefix=build/fuzz/ "${@:3}" "build/fuzz/corpus/$1" $seeds
fi
