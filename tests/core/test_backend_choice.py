"""Which backend the set-up builds llama-cpp-python for: a pure function of the machine's facts,
and the set-up script's one line on this machine."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from specchat.core.machine.backend_choice import (
    BuildFacts,
    backend_from_cmake_args,
    backends_in_libs,
    choose_backend,
    detect_build_facts,
    installed_backends,
    needs_rebuild,
    rebuild_command,
)

ROOT = Path(__file__).resolve().parents[2]
LINUX = {"system": "Linux", "machine": "x86_64"}
SMI, NVCC = "/usr/bin/nvidia-smi", "/usr/local/cuda/bin/nvcc"


@pytest.mark.parametrize(
    ("facts", "backend", "cmake", "words"),
    [
        (BuildFacts(**LINUX), "cpu", None, "no NVIDIA GPU"),
        (BuildFacts(**LINUX, nvidia_smi=SMI, nvcc=NVCC), "cuda", "-DGGML_CUDA=on", "CUDA toolkit"),
        (BuildFacts(**LINUX, nvidia_smi=SMI), "cpu", None, "not the CUDA toolkit"),
        (BuildFacts(**LINUX, nvcc=NVCC), "cpu", None, "no NVIDIA GPU"),  # toolkit, no GPU
        (BuildFacts("Darwin", "arm64"), "metal", None, "Apple Silicon"),
        (BuildFacts("Darwin", "x86_64"), "cpu", "-DGGML_METAL=off", "Intel Mac"),
        (BuildFacts("Windows", "AMD64", nvidia_smi=SMI, nvcc=NVCC), "cuda", "-DGGML_CUDA=on", ""),
        (BuildFacts(**LINUX, nvidia_smi=SMI, nvcc=NVCC, override="cpu"), "cpu", None, "=cpu"),
        (BuildFacts("Darwin", "arm64", override=" CPU "), "cpu", "-DGGML_METAL=off", "=cpu"),
        (BuildFacts(**LINUX, override="vulkan"), "vulkan", "-DGGML_VULKAN=on", "=vulkan"),
        (BuildFacts(**LINUX, override="cuda"), "cuda", "-DGGML_CUDA=on", "=cuda"),
        (
            BuildFacts(**LINUX, nvidia_smi=SMI, nvcc=NVCC, cmake_args="-DGGML_VULKAN=on"),
            "vulkan",
            "-DGGML_VULKAN=on",
            "CMAKE_ARGS",
        ),
    ],
)
def test_choice_follows_the_facts(
    facts: BuildFacts, backend: str, cmake: str | None, words: str
) -> None:
    choice = choose_backend(facts)
    assert (choice.backend, choice.cmake_args) == (backend, cmake)
    assert words in choice.reason
    line = choice.line()
    assert line.startswith(f"specchat set-up: {choice.label} backend: ") and "\n" not in line
    assert "SPECCHAT_BACKEND=cpu|cuda|metal|vulkan" in line


def test_cuda_build_is_told_where_nvcc_is_and_warned_without_it() -> None:
    assert choose_backend(BuildFacts(**LINUX, nvidia_smi=SMI, nvcc=NVCC)).env == {"CUDACXX": NVCC}
    forced = choose_backend(BuildFacts(**LINUX, override="cuda"))
    assert forced.explicit and any("nvcc" in w for w in forced.warnings)
    no_toolkit = choose_backend(BuildFacts(**LINUX, nvidia_smi=SMI))
    assert no_toolkit.warnings and not no_toolkit.explicit


def test_forced_cuda_keeps_the_users_cmake_args() -> None:
    # A toolkit without cuBLAS or the driver stub needs paths and one architecture (docs/gpu.md)
    args = "-DCMAKE_CUDA_ARCHITECTURES=89 -DGGML_CUDA_NO_VMM=on"
    choice = choose_backend(BuildFacts(**LINUX, nvcc=NVCC, override="cuda", cmake_args=args))
    assert (choice.backend, choice.cmake_args) == ("cuda", f"-DGGML_CUDA=on {args}")
    assert choice.env == {"CUDACXX": NVCC} and choice.explicit


@pytest.mark.parametrize(
    ("facts", "message"),
    [
        (BuildFacts(**LINUX, override="rocm"), "choose one of cpu, cuda, metal, vulkan"),
        (BuildFacts(**LINUX, override="metal"), "macOS only"),
        (BuildFacts("Darwin", "arm64", override="cuda"), "macOS"),
    ],
)
def test_impossible_overrides_are_refused(facts: BuildFacts, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        choose_backend(facts)


def test_facts_are_detected_from_path_and_environment() -> None:
    tools = {"nvidia-smi": SMI}
    facts = detect_build_facts(
        {"CUDA_HOME": "/opt/cuda", "SPECCHAT_BACKEND": "cuda"},
        which=tools.get,
        is_file=lambda p: p == "/opt/cuda/bin/nvcc",
        system="Linux",
        machine="x86_64",
    )
    # (the Vulkan headers and the distribution are read from this machine's files: not here)
    assert replace(facts, vulkan_headers=None, spirv_headers=None, distro=None) == BuildFacts(
        "Linux", "x86_64", nvidia_smi=SMI, nvcc="/opt/cuda/bin/nvcc", override="cuda"
    )
    bare = detect_build_facts({}, which=lambda _: None, is_file=lambda _: False, system="Linux")
    assert (bare.nvidia_smi, bare.nvcc, bare.override, bare.cmake_args) == (None,) * 4


def test_installed_build_and_rebuild_rule(tmp_path: Path) -> None:
    cpu = backends_in_libs(["libggml-base.so", "libggml-cpu.so", "libllama.so", "libmtmd.so"])
    cuda = backends_in_libs(["libggml-cpu.so", "libggml-cuda.so", "ggml-base.dll"])
    assert cpu == {"cpu"} and cuda == {"cpu", "cuda"}
    assert backends_in_libs(["libggml-metal.dylib", "libggml-blas.dylib"]) == {"metal", "blas"}
    gpu = choose_backend(BuildFacts(**LINUX, nvidia_smi=SMI, nvcc=NVCC))
    plain = choose_backend(BuildFacts(**LINUX))
    asked_cpu = choose_backend(BuildFacts(**LINUX, override="cpu"))
    assert needs_rebuild(cpu, gpu) and not needs_rebuild(cuda, gpu)
    assert not needs_rebuild(None, gpu)  # nothing installed: the install builds it
    assert not needs_rebuild(cuda, plain)  # a GPU build is never downgraded unasked
    assert needs_rebuild(cuda, asked_cpu) and not needs_rebuild(cpu, asked_cpu)
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "libggml-vulkan.so").touch()
    assert installed_backends(lib) == {"vulkan"}


def test_rebuild_command_is_one_line() -> None:
    gpu = choose_backend(BuildFacts(**LINUX, nvidia_smi=SMI, nvcc=NVCC))
    assert rebuild_command(gpu, "0.3.36", "/v/bin/python") == (
        'CMAKE_ARGS="-DGGML_CUDA=on" /v/bin/python -m pip install --force-reinstall --no-deps '
        "--no-cache-dir llama-cpp-python==0.3.36"
    )
    metal = choose_backend(BuildFacts("Darwin", "arm64"))
    assert rebuild_command(metal, "1").startswith("python -m pip install --force-reinstall")


def test_cmake_args_name_their_backend() -> None:
    assert backend_from_cmake_args("-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=89") == "cuda"
    assert backend_from_cmake_args("-DGGML_METAL=off") == "cpu"
    assert backend_from_cmake_args("-DGGML_BLAS=ON -DGGML_BLAS_VENDOR=OpenBLAS") == "custom"


@pytest.mark.skipif(
    platform.system() == "Darwin", reason="a Mac builds for Metal or says it is an Intel Mac"
)
def test_setup_script_prints_the_backend_line(tmp_path: Path) -> None:
    """The README's set-up step on a machine without nvidia-smi: "CPU backend" and why.
    (`pip install --help` stands in for the install: it prints pip's help, installs nothing.)"""
    env = {k: v for k, v in os.environ.items() if k not in ("CMAKE_ARGS", "SPECCHAT_BACKEND")}
    env["PATH"] = str(tmp_path)  # no nvidia-smi, no nvcc
    script = ROOT / "packaging" / "pip_install.py"
    proc = subprocess.run(
        [sys.executable, str(script), "--help"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    first = proc.stdout.splitlines()[0]
    assert first.startswith("specchat set-up: CPU backend: no NVIDIA GPU (no nvidia-smi on PATH)")
    assert "-m pip install --help" in proc.stdout  # then pip runs with the user's arguments

    env["SPECCHAT_BACKEND"] = "warp"
    bad = subprocess.run(
        [sys.executable, str(script), "--help"], capture_output=True, text=True, env=env
    )
    assert bad.returncode == 2 and "SPECCHAT_BACKEND=warp" in bad.stderr
