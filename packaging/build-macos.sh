#!/usr/bin/env bash
# Build SpecChat for macOS from the repository's venv (run on a Mac):
#   dist/SpecChat.app                      the app (double-click; no terminal window)
#   dist/SpecChat-macos-<arch>.zip         the app, zipped for download
#
#   packaging/build-macos.sh               (PYTHON=... to use another interpreter)
#   SELFTEST=1 packaging/build-macos.sh    also run the app's --self-test (needs the model pair)
#
# llama-cpp-python: on Apple Silicon `pip install -e .` builds llama.cpp with Metal by default,
# and the app carries that build. On Intel Macs, build it without Metal:
#   CMAKE_ARGS="-DGGML_METAL=off" pip install --force-reinstall --no-cache-dir llama-cpp-python==0.3.36
#
# Signing and notarization (optional; an unsigned app opens after right-click > Open, or after
# `xattr -dr com.apple.quarantine SpecChat.app`): set
#   CODESIGN_IDENTITY="Developer ID Application: Name (TEAMID)"
#   NOTARY_PROFILE=<a profile stored with `xcrun notarytool store-credentials`>
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-.venv/bin/python}
arch=$(uname -m)
t0=$(date +%s)
step() { echo "== $(( $(date +%s) - t0 ))s: $*"; }

# The icon: resources/icons/specchat.icns is committed (packaging/make_icons.py assembles it from
# the PNGs). ICONUTIL=1 remakes it with Apple's iconutil from the same PNGs instead.
if [ "${ICONUTIL:-0}" = 1 ]; then
    step "specchat.icns with iconutil"
    iconset=build/specchat.iconset
    rm -rf "$iconset"
    mkdir -p "$iconset"
    icons=resources/icons
    cp "$icons/specchat-16.png" "$iconset/icon_16x16.png"
    cp "$icons/specchat-32.png" "$iconset/icon_16x16@2x.png"
    cp "$icons/specchat-32.png" "$iconset/icon_32x32.png"
    cp "$icons/specchat-64.png" "$iconset/icon_32x32@2x.png"
    cp "$icons/specchat-128.png" "$iconset/icon_128x128.png"
    cp "$icons/specchat-256.png" "$iconset/icon_128x128@2x.png"
    cp "$icons/specchat-256.png" "$iconset/icon_256x256.png"
    cp "$icons/specchat-512.png" "$iconset/icon_256x256@2x.png"
    cp "$icons/specchat-512.png" "$iconset/icon_512x512.png"
    iconutil -c icns "$iconset" -o "$icons/specchat.icns"
fi

step "pyinstaller"
"$PYTHON" -m PyInstaller --noconfirm --clean packaging/specchat.spec \
    --distpath dist --workpath build/pyinstaller
binary=dist/SpecChat.app/Contents/MacOS/specchat
"$binary" --version
if [ "${SELFTEST:-0}" = 1 ]; then
    step "self-test"
    "$binary" --self-test
fi

if [ -n "${CODESIGN_IDENTITY:-}" ]; then
    step "codesign"
    # Hardened runtime; ctypes (llama-cpp-python) needs unsigned executable memory.
    codesign --force --deep --timestamp --options runtime \
        --entitlements packaging/entitlements.plist \
        --sign "$CODESIGN_IDENTITY" dist/SpecChat.app
    codesign --verify --deep --strict --verbose=2 dist/SpecChat.app
fi

step "zip"
zip=dist/SpecChat-macos-$arch.zip
rm -f "$zip"
ditto -c -k --keepParent dist/SpecChat.app "$zip"

if [ -n "${CODESIGN_IDENTITY:-}" ] && [ -n "${NOTARY_PROFILE:-}" ]; then
    step "notarize"
    xcrun notarytool submit "$zip" --keychain-profile "$NOTARY_PROFILE" --wait
    xcrun stapler staple dist/SpecChat.app
    rm -f "$zip"
    ditto -c -k --keepParent dist/SpecChat.app "$zip"
fi

du -sh dist/SpecChat.app "$zip"
step "done"
