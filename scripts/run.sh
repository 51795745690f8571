#!/usr/bin/env bash
# Set-up, build, and run orchid. With no arguments it runs the main job on the built-in model (models/orchid-tiny,
# a tiny trained test model, not gpt-oss): one chat exchange, the request rendered as Harmony and answered
# greedily on the CPU backend (the CUDA backend when built with --cuda and a GPU is present), the answer printed
# as the model wrote it (reasoning, then the final message). Any arguments are passed to the orchid binary
# instead, e.g.
#   scripts/run.sh serve --port 8000
set -euo pipefail
cd "$(dirname "$0")/.."
preset=cpu
if [ "${1:-}" = "--cuda" ]; then preset=cuda; shift; scripts/setup.sh --cuda; else scripts/setup.sh; fi
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset" -j "${ORCHID_JOBS:-2}" --target orchid
bin="build/$preset/src/cli/orchid"
if [ $# -eq 0 ]; then
  question="How many minutes are in 7 hours?"
  request="{\"messages\": [{\"role\": \"user\", \"content\": \"$question\"}]}"
  echo "user: $question"
  # The request as the server renders it (render prints the Harmony text, then its token ids).
  ids=$(printf '%s' "$request" | "$bin" render - --log-level warn | tail -n 1 | tr -d '[] ')
  printf 'assistant: '
  set -- generate --prompt-ids "$ids" --max-tokens 96 --temperature 0 --log-level warn
fi
exec "$bin" "$@"
