#!/usr/bin/env bash
# CI smoke test of the frozen app: build the one-folder bundle into dist/ with the repository's
# venv, then run its --self-test (Qt offscreen + the default model pair, off/draft/lookup).
# Prints how long each part took; exits non-zero if either part fails.
#
#   packaging/ci-smoke.sh          (PYTHON=... to use another interpreter)
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-.venv/bin/python}
t_start=$(date +%s)
t_lap=$t_start
lap() {
    local now
    now=$(date +%s)
    echo "== ci-smoke: $1: $((now - t_lap))s"
    t_lap=$now
}

nice -n 10 "$PYTHON" -m PyInstaller --noconfirm --clean --log-level WARN \
    packaging/specchat.spec --distpath dist --workpath build/pyinstaller
lap "PyInstaller build"
echo "== ci-smoke: bundle size $(du -sh dist/specchat | cut -f1)"

dist/specchat/specchat --version
dist/specchat/specchat --self-test
lap "frozen self-test"
echo "== ci-smoke: total $(($(date +%s) - t_start))s"
