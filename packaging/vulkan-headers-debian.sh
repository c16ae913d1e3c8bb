#!/usr/bin/env bash
# Newer Vulkan and SPIRV headers for building llama.cpp's Vulkan backend on Debian 12 (bookworm).
#
# bookworm's libvulkan-dev (1.3.239) is too old for the llama.cpp that llama-cpp-python vendors
# ("'LayerSettingEXT' is not a member of 'vk'"). This script fetches the *headers only* of
# Debian 13's libvulkan-dev and spirv-headers with apt's own tools, using a private apt state
# (nothing is added to the system's sources, nothing is installed), unpacks them with dpkg -x
# under a cache directory and prints the CMAKE_ARGS that point the build at them. The Vulkan
# loader stays the system's.
#
#   CMAKE_ARGS="$(bash packaging/vulkan-headers-debian.sh)" SPECCHAT_BACKEND=vulkan \
#       .venv/bin/python packaging/pip_install.py -e '.[dev]'
#
# A second run (or a run without a network) reuses the unpacked headers.
set -euo pipefail
SUITE="${SPECCHAT_VULKAN_HEADERS_SUITE:-trixie}"
MIRROR="${SPECCHAT_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
DEST="${XDG_CACHE_HOME:-$HOME/.cache}/specchat/vulkan-headers-$SUITE"
say() { echo "vulkan-headers: $*" >&2; }
flags() {
    echo "-DGGML_VULKAN=on -DVulkan_INCLUDE_DIR=$DEST/root/usr/include" \
        "-DSPIRV-Headers_DIR=$DEST/root/usr/share/cmake/SPIRV-Headers"
}

if [[ -f "$DEST/root/usr/include/vulkan/vulkan_core.h" && -d "$DEST/root/usr/share/cmake/SPIRV-Headers" ]]; then
    say "using $DEST (already unpacked)"
    flags
    exit 0
fi
command -v apt-get >/dev/null && command -v dpkg >/dev/null || {
    say "this script is for Debian/Ubuntu (apt-get and dpkg); see docs/gpu.md for other systems"
    exit 1
}
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/archives/partial" "$work/debs"
cat >"$work/sources.list" <<EOF
deb $MIRROR $SUITE main
EOF
apt_opts=(
    -o "Dir::Etc::SourceList=$work/sources.list" -o "Dir::Etc::SourceParts=/nonexistent"
    -o "Dir::State::Lists=$work/lists" -o "Dir::Cache::Archives=$work/archives"
    -o "Dir::Cache::pkgcache=" -o "Dir::Cache::srcpkgcache=" -o "APT::Sandbox::User=root"
)
say "reading the $SUITE package list from $MIRROR (private apt state, the system's is untouched)"
apt-get "${apt_opts[@]}" -qq update >&2 || { say "cannot reach $MIRROR for $SUITE"; exit 1; }
# the exact versions of the suite, so apt never mixes in bookworm's
vers=()
for pkg in libvulkan-dev spirv-headers; do
    v="$(apt-cache "${apt_opts[@]}" show "$pkg" 2>/dev/null | awk '/^Version:/{print $2; exit}')"
    [[ -n "$v" ]] || { say "$pkg is not in $SUITE"; exit 1; }
    vers+=("$pkg=$v")
done
say "downloading ${vers[*]} (headers only, not installed)"
(cd "$work/debs" && apt-get "${apt_opts[@]}" -qq download "${vers[@]}" >&2)
rm -rf "$DEST.partial" && mkdir -p "$DEST.partial/root"
for deb in "$work"/debs/*.deb; do dpkg -x "$deb" "$DEST.partial/root"; done
[[ -f "$DEST.partial/root/usr/include/vulkan/vulkan_core.h" ]] || { say "no vulkan_core.h in the package"; exit 1; }
rm -rf "$DEST" && mv "$DEST.partial" "$DEST"  # never a half-unpacked tree taken for whole
say "unpacked into $DEST"
flags
