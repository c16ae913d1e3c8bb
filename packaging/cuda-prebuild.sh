#!/usr/bin/env bash
# Build llama.cpp's CUDA backend HERE (a machine with nvcc but no GPU) for a lent CUDA device, and
# pack it into .gpu/ next to ../shared/gpu-kit's files, so the device's short lease is spent
# measuring, not compiling (docs/gpu.md, "Where a CUDA GPU is at hand"). Run after
# `bash ../shared/gpu-kit/prepare.sh`; then a device call with carry [".gpu"]:
#   bash packaging/device-measure.sh 2>&1 | tee $OUT/log.txt
# ARCH (default 90: H100/H200) picks the CUDA architecture. About 19 min on 2 cores.
set -euo pipefail
root="$(git rev-parse --show-toplevel)"; cd "$root"
[ -f .gpu/llama-src.tar.gz ] || { echo "run ../shared/gpu-kit/prepare.sh first" >&2; exit 1; }
command -v nvcc >/dev/null || { echo "needs nvcc (the CUDA toolkit)" >&2; exit 1; }
work="${CUDA_PREBUILD_DIR:-$HOME/.cache/specchat/cuda-prebuild}"; mkdir -p "$work"
# cuBLAS from PyPI when the toolkit has none (this machine's CUDA 13.0 toolkit does not)
cub="$work/cublas/nvidia/cu13"
if [ ! -e /usr/local/cuda/include/cublas_v2.h ] && [ ! -e "$cub/lib/libcublas.so.13" ]; then
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 -d "$work/cublas" nvidia-cublas
  (cd "$work/cublas" && unzip -q -o nvidia_cublas-*.whl 'nvidia/*')
fi
extra=()
if [ -e "$cub/lib/libcublas.so.13" ]; then
  extra=(-DCUDA_cublas_LIBRARY="$cub/lib/libcublas.so.13" -DCUDA_cublasLt_LIBRARY="$cub/lib/libcublasLt.so.13"
         -DCMAKE_CUDA_FLAGS="-I$cub/include" -DCMAKE_CXX_FLAGS="-I$cub/include")
fi
[ -d "$work/llama.cpp" ] || tar xzf .gpu/llama-src.tar.gz -C "$work"  # kept: a rerun rebuilds nothing
# GGML_CUDA_NO_VMM: no libcuda stub here; GGML_NATIVE off: the device's CPU may lack this one's
cmake -S "$work/llama.cpp" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES="${ARCH:-90}" -DBUILD_SHARED_LIBS=ON -DGGML_NATIVE=OFF -DGGML_CUDA_NO_VMM=ON \
  -DLLAMA_OPENSSL=OFF -DGGML_CUDA_NCCL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF "${extra[@]}" >/dev/null
cmake --build "$work/build" -j "$(nproc)" --target llama llama-bench llama-speculative-simple llama-completion
(cd "$work/build/bin" && XZ_OPT='-6 -T0' tar cJf "$root/.gpu/prebuilt.tar.xz" lib* llama-bench llama-completion llama-speculative-simple)
# the kit's headers compressed, and SpecChat's wheel rebuilt from this checkout
for m in target draft; do [ -f ".gpu/$m.hdr" ] && gzip -9 -f ".gpu/$m.hdr"; done
rm -f .gpu/whl/specchat-*.whl; python3 -m pip wheel -q --no-deps . -w .gpu/whl
du -sb .gpu | awk '{printf ".gpu: %.1f MiB (a device call carries 64 MiB with the working tree)\n", $1/1048576}'
