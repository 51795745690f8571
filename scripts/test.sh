#!/usr/bin/env bash
# Runs every CPU test: set-up, the clang-format check, build (preset `cpu`), C++ tests (ctest, GPU tests
# excluded), Python tests, and the bounded fuzz runs. Used by .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/check-format.sh
cmake --preset cpu >/dev/null
cmake --build --preset cpu -j "${ORCHID_JOBS:-2}"
ctest --preset cpu -j "${ORCHID_JOBS:-2}"
if [ -d tests/python ] && ls tests/python/test_*.py >/dev/null 2>&1; then
  # Two workers, a test file each at a time (module fixtures such as servers stay with their file): most
  # tests wait on a server process, so this takes ~0.65 of a serial run on 2 cores.
  .venv/bin/python -m pytest -q -n "${ORCHID_JOBS:-2}" --dist loadfile tests/python
fi
scripts/fuzz.sh --ci
echo "orchid: all tests passed"
