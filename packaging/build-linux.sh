#!/usr/bin/env bash
# Build SpecChat for Linux from the repository's venv:
#   dist/specchat/                         the one-folder app (run dist/specchat/specchat)
#   dist/specchat-linux-<arch>.tar.gz      that folder + specchat.desktop + icon + install.sh
#   dist/SpecChat-<arch>.AppImage          only where appimagetool is on PATH
#
#   packaging/build-linux.sh               (PYTHON=... to use another interpreter)
#
# The build machine's libxcb-* libraries are bundled with Qt's xcb plugin; install them first so
# the app starts on desktops that lack them:
#   apt-get install libxcb-cursor0 libxcb-icccm4 libxcb-keysyms1 libxkbcommon-x11-0
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-.venv/bin/python}
arch=$(uname -m)
name=specchat-linux-$arch
t0=$(date +%s)
step() { echo "== $(( $(date +%s) - t0 ))s: $*"; }

step "pyinstaller"
nice -n 10 "$PYTHON" -m PyInstaller --noconfirm --clean packaging/specchat.spec \
    --distpath dist --workpath build/pyinstaller
dist/specchat/specchat --version

step "tarball dist/$name.tar.gz"
stage=build/tarball/$name
rm -rf build/tarball
mkdir -p "$stage"
cp -R dist/specchat "$stage/specchat"
cp resources/specchat.desktop "$stage/specchat.desktop"
cp resources/icons/specchat-256.png "$stage/specchat.png"
cp packaging/install.sh "$stage/install.sh"
chmod 755 "$stage/install.sh"
tar -C build/tarball -czf "dist/$name.tar.gz" "$name"

if command -v appimagetool > /dev/null 2>&1; then
    step "AppImage dist/SpecChat-$arch.AppImage"
    appdir=build/SpecChat.AppDir
    rm -rf "$appdir"
    mkdir -p "$appdir/usr/lib"
    cp -R dist/specchat "$appdir/usr/lib/specchat"
    cp resources/specchat.desktop "$appdir/specchat.desktop"
    cp resources/icons/specchat-256.png "$appdir/specchat.png"
    cat > "$appdir/AppRun" << 'EOF'
#!/bin/sh
here=$(dirname "$(readlink -f "$0")")
exec "$here/usr/lib/specchat/specchat" "$@"
EOF
    chmod 755 "$appdir/AppRun"
    ARCH=$arch appimagetool --no-appstream "$appdir" "dist/SpecChat-$arch.AppImage"
else
    step "no appimagetool on PATH: no AppImage (see packaging/README.md)"
fi

du -sh dist/specchat "dist/$name.tar.gz"
step "done"
