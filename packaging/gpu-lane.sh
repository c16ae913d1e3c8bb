#!/usr/bin/env bash
# The GPU lane: llama.cpp's Vulkan backend on Mesa's llvmpipe (docs/gpu.md). Run from the
# repository root after the README's test set-up; `.ci/run` runs it when SPECCHAT_CI_GPU_LANE=1.
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$(date +%s)
phase() { echo "== gpu-lane $(( $(date +%s) - t0 ))s: $*"; }
# The real GPU code path of ggml (device buffers, offloaded layers, copies, synchronisation),
# slowly. A second env, .venv-vulkan, built by the README's set-up with SPECCHAT_BACKEND=vulkan;
# its wheel stays in pip's cache (<pip cache>/specchat-vulkan), so a second run builds nothing.
phase "GPU lane: Vulkan build (packages, headers, .venv-vulkan)"
need=()
for pkg in glslc libvulkan-dev mesa-vulkan-drivers vulkan-tools; do
    dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if ((${#need[@]})); then
    sudo=""; [[ $(id -u) -eq 0 ]] || sudo="sudo"
    $sudo apt-get update -qq && $sudo apt-get install -y -qq --no-install-recommends "${need[@]}"
fi
vk_args="$(bash packaging/vulkan-headers-debian.sh)"  # Debian 13's headers (bookworm's are old)
python3 -m venv .venv-vulkan
CMAKE_ARGS="$vk_args" SPECCHAT_BACKEND=vulkan .venv-vulkan/bin/python packaging/pip_install.py -e '.[dev]'
phase "GPU lane: doctor and tests/gpu on llvmpipe"
export GGML_VK_VISIBLE_DEVICES=0  # llama.cpp skips CPU-type Vulkan devices unless named
# ggml-vulkan's fused kernels crash Mesa 22.3's llvmpipe on 3-token batches (a verification's
# shape; docs/gpu.md): the lane runs unfused. Not set for real GPUs, where nothing says so.
export GGML_VK_DISABLE_FUSION=1
.venv-vulkan/bin/specchat-cli doctor
SPECCHAT_GPU_TESTS=1 .venv-vulkan/bin/python -X faulthandler -m pytest tests/gpu -p no:cacheprovider
phase "done"
