"""Which llama.cpp backend to build llama-cpp-python for: a pure function of the machine's facts.

The set-up script (``packaging/pip_install.py``, the README's set-up step) loads this file by its
path before SpecChat is installed, so it imports nothing but the standard library. ``specchat-cli
doctor`` uses it too, to tell a user whose machine has a GPU but whose build is CPU-only the one
command that rebuilds.

Rules (``choose_backend``): ``SPECCHAT_BACKEND=cpu|cuda|metal|vulkan`` wins; then ``CMAKE_ARGS``
set by the user is passed through as it is; then an Apple Silicon Mac gets Metal
(llama-cpp-python's default there); an NVIDIA GPU (``nvidia-smi``) with the CUDA toolkit
(``nvcc``) gets CUDA; everything else gets the CPU.
"""

from __future__ import annotations

import importlib.util
import os
import platform
import re
import shutil
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

ENV_BACKEND = "SPECCHAT_BACKEND"
BACKENDS = ("cpu", "cuda", "metal", "vulkan")
LABELS = {"cpu": "CPU", "cuda": "CUDA", "metal": "Metal", "vulkan": "Vulkan", "custom": "custom"}
GPU_BACKENDS = frozenset({"cuda", "metal", "vulkan", "hip", "sycl", "opencl"})
OVERRIDE_HINT = f"set {ENV_BACKEND}=cpu|cuda|metal|vulkan to choose another"

_CMAKE = {"cuda": "-DGGML_CUDA=on", "vulkan": "-DGGML_VULKAN=on"}
_CUDA_HOMES = ("CUDA_HOME", "CUDA_PATH")
_CUDA_DEFAULT = "/usr/local/cuda"


@dataclass(frozen=True)
class BuildFacts:
    """What the set-up can see about the machine before building anything."""

    system: str  # platform.system(): "Linux", "Darwin", "Windows"
    machine: str  # platform.machine(): "x86_64", "arm64", "AMD64", "aarch64"
    nvidia_smi: str | None = None  # path of nvidia-smi (the NVIDIA driver is installed)
    nvcc: str | None = None  # path of the CUDA compiler (the CUDA toolkit is installed)
    glslc: str | None = None  # path of the Vulkan shader compiler (the Vulkan SDK)
    override: str | None = None  # $SPECCHAT_BACKEND
    cmake_args: str | None = None  # $CMAKE_ARGS, when the user set it

    @property
    def apple_silicon(self) -> bool:
        return self.system == "Darwin" and self.machine.lower() in ("arm64", "aarch64")

    @property
    def has_gpu(self) -> bool:
        """A GPU llama.cpp can use is known to be there (NVIDIA driver, or an Apple Silicon Mac)."""
        return self.nvidia_smi is not None or self.apple_silicon


@dataclass(frozen=True)
class BackendChoice:
    backend: str  # one of BACKENDS, or "custom" (the user's own CMAKE_ARGS)
    reason: str
    cmake_args: str | None = None  # CMAKE_ARGS for the build; None: llama-cpp-python's default
    env: Mapping[str, str] = field(default_factory=dict)  # more build environment (CUDACXX)
    warnings: tuple[str, ...] = ()
    explicit: bool = False  # asked for by SPECCHAT_BACKEND or CMAKE_ARGS

    @property
    def label(self) -> str:
        return LABELS.get(self.backend, self.backend)

    @property
    def default_build(self) -> bool:
        """Whether a plain ``pip install llama-cpp-python`` builds exactly this (so pip's usual
        wheel cache may be used: it keys wheels by source, not by CMAKE_ARGS)."""
        return self.cmake_args is None

    def line(self) -> str:
        """The set-up's one line: which backend and why."""
        return f"specchat set-up: {self.label} backend: {self.reason} ({OVERRIDE_HINT})"


def backend_from_cmake_args(args: str) -> str:
    """The backend a CMAKE_ARGS string asks for ("custom" when it names none)."""
    on = {m.group(1).lower() for m in re.finditer(r"-DGGML_(\w+)=(?:on|1|yes|true)\b", args, re.I)}
    for name in ("cuda", "vulkan", "metal", "hip", "sycl"):
        if name in on:
            return name
    return "cpu" if re.search(r"-DGGML_METAL=(?:off|0|no|false)\b", args, re.I) else "custom"


def choose_backend(facts: BuildFacts) -> BackendChoice:
    """The backend to build llama-cpp-python for. Raises ValueError for an impossible override."""
    override = (facts.override or "").strip().lower()
    if override:
        return _overridden(override, facts)
    if facts.cmake_args:
        return BackendChoice(
            backend_from_cmake_args(facts.cmake_args),
            f"CMAKE_ARGS={facts.cmake_args!r} is set, so it is passed to the build as it is",
            facts.cmake_args,
            explicit=True,
        )
    if facts.apple_silicon:
        return BackendChoice("metal", "an Apple Silicon Mac (Metal is llama-cpp-python's default)")
    if facts.system == "Darwin":
        return BackendChoice("cpu", "an Intel Mac (Metal turned off)", "-DGGML_METAL=off")
    if facts.nvidia_smi and facts.nvcc:
        return BackendChoice(
            "cuda",
            f"an NVIDIA GPU ({facts.nvidia_smi}) and the CUDA toolkit ({facts.nvcc})",
            _CMAKE["cuda"],
            {"CUDACXX": facts.nvcc},
        )
    if facts.nvidia_smi:
        why = (
            f"an NVIDIA GPU was found ({facts.nvidia_smi}) but not the CUDA toolkit (nvcc), "
            "which the CUDA build needs; install it and run this command again"
        )
        return BackendChoice("cpu", why, warnings=(why,))
    return BackendChoice(
        "cpu", "no NVIDIA GPU (no nvidia-smi on PATH) and not an Apple Silicon Mac"
    )


def _overridden(name: str, facts: BuildFacts) -> BackendChoice:
    why = f"{ENV_BACKEND}={name}"
    if name not in BACKENDS:
        raise ValueError(f"{why}: choose one of {', '.join(BACKENDS)}")
    if name == "cpu":
        flags = "-DGGML_METAL=off" if facts.system == "Darwin" else None
        return BackendChoice("cpu", why, flags, explicit=True)
    if name == "metal":
        if facts.system != "Darwin":
            raise ValueError(f"{why}: Metal is for macOS only")
        return BackendChoice("metal", why, explicit=True)
    if name == "cuda":
        if facts.system == "Darwin":
            raise ValueError(f"{why}: CUDA does not run on macOS")
        warnings = () if facts.nvcc else ("the CUDA toolkit (nvcc) was not found: the build fails",)
        env = {"CUDACXX": facts.nvcc} if facts.nvcc else {}
        return BackendChoice("cuda", why, _CMAKE["cuda"], env, warnings, explicit=True)
    warnings = () if facts.glslc else ("the Vulkan SDK (glslc) was not found: the build fails",)
    return BackendChoice("vulkan", why, _CMAKE["vulkan"], warnings=warnings, explicit=True)


def detect_build_facts(
    environ: Mapping[str, str] | None = None,
    *,
    which: Callable[[str], str | None] = shutil.which,
    is_file: Callable[[str], bool] = os.path.isfile,
    system: str | None = None,
    machine: str | None = None,
) -> BuildFacts:
    """Look at this machine (the arguments let tests describe another one)."""
    env = os.environ if environ is None else environ
    nvcc = which("nvcc")
    if nvcc is None:
        homes = [env.get(k) for k in _CUDA_HOMES] + [_CUDA_DEFAULT]
        for home in filter(None, homes):
            for name in ("nvcc", "nvcc.exe"):
                candidate = os.path.join(home, "bin", name)
                if is_file(candidate):
                    nvcc = candidate
                    break
            if nvcc:
                break
    return BuildFacts(
        system=system or platform.system(),
        machine=machine or platform.machine(),
        nvidia_smi=which("nvidia-smi"),
        nvcc=nvcc,
        glslc=which("glslc"),
        override=env.get(ENV_BACKEND) or None,
        cmake_args=env.get("CMAKE_ARGS") or None,
    )


# -- what is installed ------------------------------------------------------------------------
def backends_in_libs(names: Iterable[str]) -> frozenset[str]:
    """Backends of a llama-cpp-python build, from the file names in ``llama_cpp/lib``
    (``libggml-cuda.so``, ``ggml-vulkan.dll``, ``libggml-metal.dylib``, …)."""
    found: set[str] = set()
    for name in names:
        m = re.match(r"(?:lib)?ggml-([a-z]+)", name.lower())
        if m and m.group(1) != "base":
            found.add(m.group(1))
        elif name.lower().startswith(("libggml.", "ggml.", "libllama.", "llama.")):
            found.add("cpu")  # an older layout: everything in one library, the CPU included
    return frozenset(found)


def installed_lib_dir() -> Path | None:
    """``llama_cpp/lib`` of the llama-cpp-python this interpreter would import (not imported)."""
    try:
        spec = importlib.util.find_spec("llama_cpp")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin:
        return None
    lib = Path(spec.origin).parent / "lib"
    return lib if lib.is_dir() else None


def installed_backends(lib_dir: Path | None = None) -> frozenset[str] | None:
    """Backends of the installed build, or None when llama-cpp-python is not installed."""
    lib_dir = lib_dir or installed_lib_dir()
    if lib_dir is None:
        return None
    return backends_in_libs(p.name for p in lib_dir.iterdir())


def needs_rebuild(installed: frozenset[str] | None, choice: BackendChoice) -> bool:
    """Whether an installed build must be rebuilt for ``choice`` (pip keeps an installed
    llama-cpp-python of the pinned version, whatever it was built for)."""
    if installed is None or choice.backend == "custom":
        return False
    if choice.backend in GPU_BACKENDS:
        return choice.backend not in installed
    return choice.explicit and bool(installed & GPU_BACKENDS)  # asked for the CPU explicitly


def rebuild_command(choice: BackendChoice, version: str, python: str = "python") -> str:
    """One shell command that rebuilds llama-cpp-python for ``choice`` (POSIX shell syntax)."""
    prefix = f'CMAKE_ARGS="{choice.cmake_args}" ' if choice.cmake_args else ""
    return (
        f"{prefix}{python} -m pip install --force-reinstall --no-deps --no-cache-dir "
        f"llama-cpp-python=={version}"
    )
