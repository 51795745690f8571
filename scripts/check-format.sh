#!/usr/bin/env bash
# Fails when a tracked C++/CUDA file differs from clang-format's output (.clang-format at the root). CI runs it
# through scripts/test.sh.   scripts/check-format.sh [--fix]   --fix: rewrite the files instead.
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files '*.cc' '*.h' '*.cu' '*.cuh' '*.hpp' '*.cpp')
if [ "${1:-}" = "--fix" ]; then
  clang-format -i "${files[@]}"
  exit 0
fi
bad=$(clang-format --dry-run -Werror "${files[@]}" 2>&1 | grep -E '^[^ ]+:[0-9]+:[0-9]+: error' | cut -d: -f1 | sort -u || true)
if [ -n "$bad" ]; then
  echo "check-format: these files are not clang-formatted (scripts/check-format.sh --fix):" >&2
  echo "$bad" | sed 's/^/  /' >&2
  exit 1
fi
echo "check-format: ${#files[@]} files clean"
