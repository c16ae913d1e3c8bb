#!/usr/bin/env bash
# Build llama.cpp's llama-server (CPU, Release, only that target) from the llama.cpp source
# vendored in the pinned llama-cpp-python sdist, and cache the binary next to pip's wheel cache:
#
#   $(pip cache dir)/specchat-llama-server/<llama-cpp-python version>/<machine>-<cpu key>/llama-server
#
# A second run finds the binary there and builds nothing. The test suite calls this script from
# a session fixture (tests/remote/conftest.py), so `python -m pytest` alone builds it once.
# Prints the binary's path as the last line of stdout; build logs go to stderr.
#
#   packaging/build-llama-server.sh                 (PYTHON=... to use another interpreter)
#
# Environment:
#   PYTHON                 interpreter whose pip and llama-cpp-python are used (.venv/bin/python)
#   SPECCHAT_LLAMA_SRC     a llama.cpp source tree, or an unpacked llama-cpp-python sdist, to
#                          build from instead of downloading the sdist with pip
#   SPECCHAT_SERVER_CACHE  cache root instead of $(pip cache dir)/specchat-llama-server
#   JOBS                   parallel compile jobs (default 2)
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-.venv/bin/python}
[ -x "$PYTHON" ] || PYTHON=$(command -v python3)
JOBS=${JOBS:-2}
log() { echo "build-llama-server: $*" >&2; }

VERSION=$("$PYTHON" -c 'import importlib.metadata as m; print(m.version("llama_cpp_python"))')
CACHE_ROOT=${SPECCHAT_SERVER_CACHE:-"$("$PYTHON" -m pip cache dir 2>/dev/null || echo "$HOME/.cache/pip")/specchat-llama-server"}
# The build is tuned for this CPU (GGML_NATIVE): key the cache by the CPU's feature flags so a
# cache carried to another machine is rebuilt instead of dying with SIGILL.
CPU_FLAGS=$( (grep -m1 -E '^(flags|Features)' /proc/cpuinfo 2>/dev/null || sysctl -n machdep.cpu.features 2>/dev/null || uname -m) | cksum | cut -d' ' -f1)
# Intel AMX's kernels crash the pinned llama.cpp (app/specchat/core/machine/amx.py): where the
# native build would compile them in, the compiler is told to leave them out.
NO_AMX=$("$PYTHON" -c "import runpy; m = runpy.run_path('app/specchat/core/machine/amx.py'); print(' '.join(m['NO_AMX_FLAGS']) if m['native_has_amx']() else '')")
if [ -n "$NO_AMX" ]; then
    export CFLAGS="${CFLAGS:-} $NO_AMX" CXXFLAGS="${CXXFLAGS:-} $NO_AMX"
    CPU_FLAGS="$CPU_FLAGS-no-amx"
fi
DEST="$CACHE_ROOT/$VERSION/$(uname -m)-$CPU_FLAGS"
BIN="$DEST/llama-server"

if [ -x "$BIN" ] && "$BIN" --version >/dev/null 2>&1; then
    log "cached: $BIN"
    echo "$BIN"
    exit 0
fi

mkdir -p "$DEST"
exec 9>"$DEST/.lock"
if command -v flock >/dev/null 2>&1; then
    flock 9  # another test process may be building the same binary: wait for it
fi
if [ -x "$BIN" ] && "$BIN" --version >/dev/null 2>&1; then
    log "cached (built meanwhile): $BIN"
    echo "$BIN"
    exit 0
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/specchat-llama-server.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

find_src() {  # a llama.cpp tree: the directory itself or an sdist's vendor/llama.cpp
    for d in "$1" "$1/vendor/llama.cpp"; do
        if [ -f "$d/tools/server/server.cpp" ]; then echo "$d"; return 0; fi
    done
    return 1
}

SRC=""
if [ -n "${SPECCHAT_LLAMA_SRC:-}" ]; then
    SRC=$(find_src "$SPECCHAT_LLAMA_SRC") || { log "no llama.cpp source in $SPECCHAT_LLAMA_SRC"; exit 1; }
else
    log "fetching the llama-cpp-python $VERSION sdist (pip's cache first)"
    "$PYTHON" -m pip download --quiet --no-deps --no-binary :all: \
        "llama-cpp-python==$VERSION" -d "$WORK/sdist" >&2
    tar -xzf "$WORK"/sdist/llama_cpp_python-*.tar.gz -C "$WORK/sdist"
    SRC=$(find_src "$(echo "$WORK"/sdist/llama_cpp_python-*/)") || { log "the sdist has no vendored llama.cpp"; exit 1; }
fi

log "building llama-server $VERSION from $SRC (-j$JOBS)"
t0=$(date +%s)
GEN=()
command -v ninja >/dev/null 2>&1 && GEN=(-G Ninja)
cmake -S "$SRC" -B "$WORK/build" "${GEN[@]}" \
    -DCMAKE_BUILD_TYPE=Release \
    -DBUILD_SHARED_LIBS=OFF \
    -DGGML_NATIVE=ON \
    -DLLAMA_OPENSSL=OFF \
    -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_TOOLS=ON \
    -DLLAMA_BUILD_SERVER=ON \
    -DLLAMA_BUILD_APP=OFF \
    -DLLAMA_BUILD_UI=OFF \
    -DLLAMA_USE_PREBUILT_UI=OFF \
    >&2
nice -n 10 cmake --build "$WORK/build" --target llama-server -j "$JOBS" >&2
built=$(find "$WORK/build" -type f -name llama-server -perm -u+x | head -n1)
[ -n "$built" ] || { log "the build produced no llama-server"; exit 1; }
cp "$built" "$BIN.tmp"
mv -f "$BIN.tmp" "$BIN"
log "built in $(( $(date +%s) - t0 ))s: $BIN"
echo "$BIN"
