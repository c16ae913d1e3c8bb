"""The set-up's Vulkan route (a Vulkan GPU, the SDK pieces, the packages named when they are
missing), doctor's Vulkan rows, and llama.cpp's load report read from its real log."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from specchat.core.machine.backend_choice import (
    BuildFacts,
    choose_backend,
    find_vulkan_headers,
    run_vulkaninfo,
    vulkan_devices_in,
    vulkan_gpus_in,
)
from specchat.core.machine.llama_log import capture

LINUX = {"system": "Linux", "machine": "x86_64"}
# `vulkaninfo --summary` on a desktop with an AMD card and llvmpipe beside it (devices part)
AMD_SUMMARY = """
Devices:
========
GPU0:
\tapiVersion         = 1.3.270
\tdeviceType         = PHYSICAL_DEVICE_TYPE_DISCRETE_GPU
\tdeviceName         = AMD Radeon RX 7600 (RADV NAVI33)
\tdriverName         = radv
GPU1:
\tapiVersion         = 1.3.230
\tdeviceType         = PHYSICAL_DEVICE_TYPE_CPU
\tdeviceName         = llvmpipe (LLVM 15.0.6, 256 bits)
\tdriverName         = llvmpipe
"""
NEW = (1, 4, 309)
READY = {"glslc": "/usr/bin/glslc", "vulkan_headers": NEW, "spirv_headers": True}


def test_vulkan_gpus_leave_cpu_devices_out() -> None:
    assert vulkan_devices_in(AMD_SUMMARY) == (
        ("AMD Radeon RX 7600 (RADV NAVI33)", "DISCRETE_GPU"),
        ("llvmpipe (LLVM 15.0.6, 256 bits)", "CPU"),
    )
    assert vulkan_gpus_in(AMD_SUMMARY) == ("AMD Radeon RX 7600 (RADV NAVI33)",)
    assert vulkan_gpus_in("") == ()


@pytest.mark.skipif(shutil.which("vulkaninfo") is None, reason="no vulkaninfo on this machine")
def test_this_machines_vulkan_devices() -> None:
    """This machine's llvmpipe (CI installs mesa-vulkan-drivers) is a device, not a GPU."""
    summary = run_vulkaninfo()
    devices = vulkan_devices_in(summary)
    assert devices, summary
    assert all(kind != "CPU" for name, kind in devices if name in vulkan_gpus_in(summary))
    if any(name.startswith("llvmpipe") for name, _ in devices):
        assert not any(g.startswith("llvmpipe") for g in vulkan_gpus_in(summary))


def test_a_vulkan_gpu_gets_vulkan_when_the_sdk_is_there() -> None:
    amd = ("AMD Radeon RX 7600",)
    ready = choose_backend(BuildFacts(**LINUX, vulkan_gpus=amd, distro="debian", **READY))
    assert (ready.backend, ready.cmake_args) == ("vulkan", "-DGGML_VULKAN=on")
    assert "AMD Radeon RX 7600" in ready.line()
    nvidia = BuildFacts(**LINUX, nvidia_smi="/usr/bin/nvidia-smi", vulkan_gpus=("RTX",), **READY)
    assert "no CUDA toolkit" in choose_backend(nvidia).reason
    with_nvcc = BuildFacts(**LINUX, nvidia_smi="/usr/bin/nvidia-smi", nvcc="/x/nvcc", **READY)
    assert choose_backend(with_nvcc).backend == "cuda"  # CUDA first when it can be built


@pytest.mark.parametrize(
    ("facts", "words"),
    [
        ({"distro": "debian"}, ["glslc", "Vulkan headers", "sudo apt install glslc libvulkan-dev"]),
        ({"distro": "fedora", "glslc": "/g"}, ["sudo dnf install", "vulkan-headers"]),
        ({"distro": "arch", "spirv_headers": False}, ["sudo pacman -S shaderc"]),
        ({"system": "Windows", "machine": "AMD64"}, ["vulkan.lunarg.com"]),
        (
            {"distro": "debian", "glslc": "/g", "vulkan_headers": (1, 3, 239)},
            ["1.3.275 or newer (found 1.3.239)", "packaging/vulkan-headers-debian.sh"],
        ),
    ],
)
def test_missing_sdk_pieces_are_named_with_their_packages(facts: dict, words: list[str]) -> None:
    base = {**LINUX, "vulkan_gpus": ("Intel Arc A770",)} | facts
    choice = choose_backend(BuildFacts(**base))
    assert choice.backend == "cpu" and choice.warnings, choice
    for word in words:
        assert word in choice.reason, (word, choice.reason)
    forced = choose_backend(BuildFacts(**base, override="vulkan"))  # builds, but says what lacks
    assert forced.backend == "vulkan" and len(forced.warnings) == 1
    assert words[-1] in forced.warnings[0]


def test_forced_vulkan_keeps_the_users_cmake_args() -> None:
    args = "-DVulkan_INCLUDE_DIR=/h/include"
    choice = choose_backend(BuildFacts(**LINUX, override="vulkan", cmake_args=args, **READY))
    assert choice.cmake_args == f"-DGGML_VULKAN=on {args}" and not choice.warnings


def test_vulkan_header_version_is_read(tmp_path: Path) -> None:
    inc = tmp_path / "vulkan"
    inc.mkdir()
    (inc / "vulkan_core.h").write_text(
        "#define VK_HEADER_VERSION 239\n"
        "#define VK_HEADER_VERSION_COMPLETE VK_MAKE_API_VERSION(0, 1, 3, VK_HEADER_VERSION)\n"
    )
    assert find_vulkan_headers([str(tmp_path / "none"), str(tmp_path)]) == (1, 3, 239)
    assert find_vulkan_headers([str(tmp_path / "none")]) is None
    if Path("/usr/include/vulkan/vulkan_core.h").is_file():  # this machine's, when installed
        assert find_vulkan_headers(["/usr/include"]) is not None


def test_load_report_from_llama_cpps_log(model_paths) -> None:
    """The real log of a CPU load: host buffers, no device, and "CPU" as where it runs."""
    from specchat.core.decoding.runtime import ModelRuntime, RuntimeConfig

    with capture() as log:
        rt = ModelRuntime(model_paths[1], RuntimeConfig(n_ctx=512, n_gpu_layers=0))
    rt.close()
    report = log.report()
    assert report.where() == "CPU" and report.device_bytes("model") == 0
    assert rt.where == "CPU"  # what the model panel shows (tests/gpu: "Vulkan0 (…): n/n layers")
    host_model = report.device_bytes("model", on_device=False)
    size = model_paths[1].stat().st_size
    assert 0.9 * size < host_model < 1.1 * size, (host_model, size)
    assert report.device_bytes("KV", on_device=False) == 512 * 12288  # 24 layers, f16 K and V
    assert report.device_bytes("compute", on_device=False) > 0
