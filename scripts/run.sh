#!/usr/bin/env bash
# Set-up, build, and run orchid. With no arguments it runs the main job on the embedded default model:
# greedy generation on `synthetic:tiny` with the CPU backend (the CUDA backend when built with --cuda and a
# GPU is present). Any arguments are passed to the orchid binary instead, e.g.
#   scripts/run.sh serve synthetic:tiny --port 8000
set -euo pipefail
cd "$(dirname "$0")/.."
preset=cpu
if [ "${1:-}" = "--cuda" ]; then preset=cuda; shift; scripts/setup.sh --cuda; else scripts/setup.sh; fi
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset" -j "${ORCHID_JOBS:-2}" --target orchid
bin="build/$preset/src/cli/orchid"
if [ $# -eq 0 ]; then
  # A Harmony prompt; --allow-special makes its <|...|> literals special tokens. Random weights: the text
  # printed is gibberish, but every step of the path (tokenizer, engine, backend, detokenizer) runs.
  set -- generate synthetic:tiny --prompt "<|start|>user<|message|>hello world<|end|><|start|>assistant" \
    --allow-special all --max-tokens 16 --temperature 0
fi
exec "$bin" "$@"
