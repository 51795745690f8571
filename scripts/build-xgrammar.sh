#!/usr/bin/env bash
# Builds xgrammar's C++ core (the grammar library behind structured outputs) from its PyPI source
# distribution into .deps/xgrammar: the static library and its headers, without the Python bindings.
# Idempotent: a finished prefix of the pinned version is left alone. Called by scripts/setup.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

version=0.2.8
prefix=.deps/xgrammar
stamp="$prefix/.orchid-version"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$version" ] && [ -f "$prefix/lib/libxgrammar.a" ]; then
  exit 0
fi

# A fixed work directory, so that ccache recognises the sources of an earlier build (its hashes include the
# paths that __FILE__ expands to).
work="${TMPDIR:-/tmp}/orchid-xgrammar-$version"
rm -rf "$work"
mkdir -p "$work"
trap 'rm -rf "$work"' EXIT
echo "setup: building xgrammar $version (C++ core only)"
# Only the source distribution (its cpp/, include/ and 3rdparty/ headers); its build dependencies come as
# wheels, which pip needs only to read the package's metadata.
.venv/bin/python -m pip download -q --no-deps --no-binary xgrammar "xgrammar==$version" -d "$work"
tar -xzf "$work/xgrammar-$version.tar.gz" -C "$work"
src="$work/xgrammar-$version"
mkdir -p "$work/build"
# The source tree's own cmake/config.cmake turns the Python bindings on; a config.cmake in the build
# directory takes precedence over it.
printf 'set(XGRAMMAR_BUILD_PYTHON_BINDINGS OFF)\nset(XGRAMMAR_BUILD_CXX_TESTS OFF)\n' > "$work/build/config.cmake"
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
# -fno-lto: the library's -flto=auto would make every orchid link redo its code generation;
# -Wno-error: its -Werror is for its own CI's compilers.
cmake -S "$src" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS="-fno-lto -Wno-error" \
  -DCMAKE_INSTALL_PREFIX="$PWD/$prefix.tmp" "${launcher[@]}" >/dev/null
cmake --build "$work/build" -j "${ORCHID_JOBS:-2}" --target install >/dev/null
install -m 644 "$src/LICENSE" "$PWD/$prefix.tmp/LICENSE"
rm -rf "$prefix"
mv "$prefix.tmp" "$prefix"
echo "$version" > "$stamp"
