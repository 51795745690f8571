#!/usr/bin/env bash
# Installs everything orchid needs on a fresh Debian 12 machine. Idempotent: safe to re-run.
#   scripts/setup.sh            Debian packages + the Python venvs for tests and tools (.venv, and
#                               .venv-llamaindex for the LlamaIndex client test)
#   scripts/setup.sh --cuda     also the CUTLASS/CuTe headers (PyPI nvidia-cutlass) for the `cuda` preset
#   scripts/setup.sh --golden   also torch + transformers, only needed to regenerate golden files
set -euo pipefail
cd "$(dirname "$0")/.."

want_cuda=0
want_golden=0
for arg in "$@"; do
  case "$arg" in
    --cuda) want_cuda=1 ;;
    --golden) want_golden=1 ;;
    -h|--help) sed -n '2,7p' "$0"; exit 0 ;;
    *) echo "setup.sh: unknown option '$arg' (try --help)" >&2; exit 2 ;;
  esac
done

# chromium + chromium-driver: the chat page's browser tests (headless; nothing downloads a browser).
debian_packages=(
  build-essential cmake ninja-build pkg-config git ccache clang clang-format libclang-rt-14-dev
  nlohmann-json3-dev libpcre2-dev libcpp-httplib-dev libcli11-dev libspdlog-dev libfmt-dev libxxhash-dev libboost-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  python3 python3-venv python3-pip
  chromium chromium-driver fonts-dejavu-core
)
missing=()
for p in "${debian_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Python: tests and tools only (the engine itself has no Python). A stamp of the requirement files' hash keeps
# re-runs from calling pip at all.
sync_venv() {
  local venv=$1
  shift
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  local stamp=$venv/.orchid-requirements
  local req_hash
  req_hash=$(cat "$@" | sha256sum | cut -c1-16)
  if [ ! -f "$stamp" ] || ! grep -qx "$req_hash" "$stamp"; then
    "$venv/bin/python" -m pip install -q --upgrade pip
    for req in "$@"; do
      "$venv/bin/python" -m pip install -q -r "$req"
    done
    echo "$req_hash" >> "$stamp"
  fi
}
main_requirements=(tools/requirements-test.txt)
[ $want_cuda = 1 ] && main_requirements+=(tools/requirements-cuda.txt)
[ $want_golden = 1 ] && main_requirements+=(tools/requirements-golden.txt)
sync_venv .venv "${main_requirements[@]}"
# LlamaIndex needs openai<3, the other client libraries openai>=3: its test runs a driver in a venv of its own.
sync_venv .venv-llamaindex tools/requirements-llamaindex.txt

# C++ libraries that Debian 12 does not package, built into .deps/ (ignored by git).
scripts/build-xgrammar.sh
echo "setup: done"
